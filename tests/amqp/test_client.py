"""FeedClient's receive path and HandshakeEndpoint, without a broker."""
from twisted.internet.defer import CancelledError, Deferred, fail, succeed
from twisted.internet.error import ConnectionRefusedError
from twisted.internet.protocol import Factory
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport, StringTransportWithDisconnection
from twisted.python.failure import Failure
from txamqp.connection import Body, Frame, Header, Method
from txamqp.queue import TimeoutDeferredQueue
from zope.interface import implementer
from twisted.internet.interfaces import IStreamClientEndpoint

from pushengine.amqp.codec import encode_frame
from pushengine.amqp.connection import (
    FeedClient, HandshakeEndpoint, ReadyClientFactory, describe)
from pushengine.amqp.spec import load_spec

SPEC = load_spec()
BASIC = SPEC.classes.byname["basic"]


def method(name, *args):
    klass, _, meth = name.partition(".")
    return Method(SPEC.classes.byname[klass].methods.byname[meth], *args)


class Listener:
    def __init__(self):
        self.events = []

    def confirmed(self, channel, tag, multiple, ack):
        self.events.append(("confirmed", channel.id, tag, multiple, ack))

    def consumer_cancelled(self, channel, tag):
        self.events.append(("cancelled", channel.id, tag))

    def channel_failed(self, channel, reason):
        self.events.append(("channel_failed", channel.id))


def connected_client(clock, heartbeat=0):
    client = FeedClient("/", heartbeat=heartbeat, clock=clock, connection_name="test",
                        listener=Listener())
    transport = StringTransport()
    client.makeConnection(transport)
    client.channel(1)  # fires at once: the channel exists from now on
    return client, transport


def delivery_frames(tag, body: bytes, chunk=4, properties=None):
    frames = [Frame(1, method("basic.deliver", "ctag", tag, False, "ex", "")),
              Frame(1, Header(BASIC, 0, len(body), **(properties or {})))]
    for i in range(0, len(body), chunk):
        frames.append(Frame(1, Body(body[i:i + chunk])))
    return b"".join(encode_frame(SPEC, f) for f in frames)


def test_delivery_with_body_split_inside_a_character():
    clock = Clock()
    client, _ = connected_client(clock)
    queue = client.queues["ctag"] = TimeoutDeferredQueue(clock=clock)
    body = '[{"type":"Stream","action":"upsert","obj":{"id":1,"t":"ééé"}}]'.encode()
    data = delivery_frames(7, body, chunk=5, properties={"content-type": "application/json"})
    for i in range(0, len(data), 3):  # arbitrary TCP segmentation
        client.dataReceived(data[i:i + 3])
    got = []
    queue.get().addCallback(got.append)
    msg, = got
    assert msg.delivery_tag == 7
    assert msg.content.body == body and isinstance(msg.content.body, bytes)
    assert msg.content.properties == {"content-type": "application/json"}


def test_empty_body_delivery():
    clock = Clock()
    client, _ = connected_client(clock)
    queue = client.queues["ctag"] = TimeoutDeferredQueue(clock=clock)
    client.dataReceived(delivery_frames(1, b""))
    got = []
    queue.get().addCallback(got.append)
    assert got[0].content.body == b""


def test_confirms_and_cancel_reach_the_listener():
    clock = Clock()
    client, _ = connected_client(clock)
    client.dataReceived(
        encode_frame(SPEC, Frame(1, method("basic.ack", 5, True)))
        + encode_frame(SPEC, Frame(1, method("basic.nack", 6, False, True)))
        + encode_frame(SPEC, Frame(1, method("basic.cancel", "ctag", True))))
    assert client.listener.events == [
        ("confirmed", 1, 5, True, True), ("confirmed", 1, 6, False, False),
        ("cancelled", 1, "ctag")]


def test_broker_channel_close_is_reported_and_answered():
    clock = Clock()
    client, transport = connected_client(clock)
    client.dataReceived(encode_frame(
        SPEC, Frame(1, method("channel.close", 406, "PRECONDITION_FAILED - x", 60, 80))))
    assert client.listener.events == [("channel_failed", 1)]
    assert client.channels[1].closed
    assert transport.value()  # channel.close-ok went out


def test_garbage_drops_the_connection():
    clock = Clock()
    client, transport = connected_client(clock)
    client.dataReceived(b"\x01\x00\x01\x00\x00\x00\x01X\x00")  # bad frame end
    assert transport.disconnected


def test_heartbeat_silence_drops_the_connection():
    clock = Clock()
    client, transport = connected_client(clock, heartbeat=2)
    client.started.fire()
    clock.advance(5)
    client.dataReceived(b"\x08\x00\x00\x00\x00\x00\x00\xce")  # a heartbeat frame
    clock.advance(5)
    assert not transport.disconnected  # 5 s since the last frame < 3 x 2 s
    clock.advance(1.5)
    assert transport.disconnected


def test_describe_reads_broker_replies():
    from txamqp.client import ConnectionClosed
    from txamqp.message import Message

    close = SPEC.classes.byname["connection"].methods.byname["close"]
    msg = Message(close, (320, "CONNECTION_FORCED - bye", 0, 0))
    assert describe(ConnectionClosed(msg)) == "320 CONNECTION_FORCED - bye"
    assert describe(Failure(ConnectionRefusedError())).startswith("Connection was refused")


# HandshakeEndpoint

@implementer(IStreamClientEndpoint)
class FakeTcp:
    """Connects at once to a transport that reports its own loss."""

    def __init__(self, refuse=False):
        self.refuse = refuse
        self.transports = []
        self.pending = None

    def connect(self, factory):
        if self.refuse:
            return fail(ConnectionRefusedError())
        proto = factory.buildProtocol(None)
        transport = StringTransportWithDisconnection()
        transport.protocol = proto
        proto.makeConnection(transport)
        self.transports.append(transport)
        return succeed(proto)


class ServiceFactory(Factory):
    """Stands for ClientService's wrapper around the ReadyClientFactory."""

    def __init__(self, inner):
        self.inner = inner
        self.lost = []

    def buildProtocol(self, addr):
        proto = self.inner.buildProtocol(addr)
        original = proto.connectionLost

        def lost(reason):
            original(reason)
            self.lost.append(reason)

        proto.connectionLost = lost
        return proto


def make_endpoint(tcp, handshake, clock, failures):
    ready = ReadyClientFactory()
    clients = []

    def build():
        client = FeedClient("/", heartbeat=0, clock=clock, connection_name="t")
        clients.append(client)
        return client

    endpoint = HandshakeEndpoint(tcp, build, handshake, ready, clock,
                                 handshake_timeout=5, on_failure=failures.append)
    return endpoint, ServiceFactory(ready), clients


def test_connection_made_only_after_the_handshake():
    clock, failures = Clock(), []
    handshake = Deferred()
    endpoint, factory, clients = make_endpoint(FakeTcp(), lambda c: handshake, clock, failures)
    d = endpoint.connect(factory)
    assert not d.called
    handshake.callback(None)
    proto = d.result
    assert proto.client is clients[0]
    proto.transport.loseConnection()
    assert len(factory.lost) == 1 and clients[0].closed
    assert failures == []


def test_failed_handshake_fails_connect_after_closing_and_tells_nobody_else():
    clock, failures = Clock(), []
    endpoint, factory, clients = make_endpoint(
        FakeTcp(), lambda c: fail(ValueError("login refused")), clock, failures)
    d = endpoint.connect(factory)
    errors = []
    d.addErrback(errors.append)
    assert errors and errors[0].check(ValueError)
    assert clients[0].closed  # its connectionLost ran
    assert factory.lost == []  # ClientService never saw this connection
    assert [f.value.args[0] for f in failures] == ["login refused"]


def test_handshake_timeout():
    clock, failures = Clock(), []
    endpoint, factory, _ = make_endpoint(FakeTcp(), lambda c: Deferred(), clock, failures)
    errors = []
    endpoint.connect(factory).addErrback(errors.append)
    clock.advance(5)
    assert errors and errors[0].check(Exception)
    assert len(failures) == 1


def test_refused_tcp_is_a_failure_too():
    clock, failures = Clock(), []
    endpoint, factory, _ = make_endpoint(FakeTcp(refuse=True), lambda c: None, clock, failures)
    errors = []
    endpoint.connect(factory).addErrback(errors.append)
    assert errors[0].check(ConnectionRefusedError) and len(failures) == 1


def test_cancel_during_handshake_aborts():
    clock, failures = Clock(), []
    tcp = FakeTcp()
    endpoint, factory, _ = make_endpoint(tcp, lambda c: Deferred(), clock, failures)
    d = endpoint.connect(factory)
    errors = []
    d.addErrback(errors.append)
    d.cancel()
    assert errors[0].check(CancelledError)
    assert not tcp.transports[0].connected
    assert failures == []  # a cancel is not a failure worth logging
