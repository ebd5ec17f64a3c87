"""One AMQP connection: the txamqp client and how it is brought up.

``FeedClient`` is txamqp's ``AMQClient`` with our frame codec (see
``codec``), client properties (a connection name and the capabilities we
handle), and the broker-sent methods txamqp has no handler for: ``basic.ack``
and ``basic.nack`` (publisher confirms) and ``basic.cancel`` (the queue we
consume from was deleted).  They, and unexpected channel closes, go to the
client's ``listener``.

``HandshakeEndpoint`` wraps a TCP endpoint so that a connection counts as
made only once the AMQP handshake (log-in, declarations, consume) is done.
That is what ``ClientService`` should see: a broker that accepts TCP but
refuses the log-in or a declaration then backs off like a broker that is
down.  (``ClientService(prepareConnection=...)`` would count those failures
too, but Twisted's state machine raises ``NoTransition`` when the
connection drops while ``prepareConnection`` is pending, which is exactly
what a failed AMQP handshake does.)
"""
from __future__ import annotations

import struct
from typing import Any, Callable, Generator, Protocol as TypingProtocol, cast

from twisted.internet.defer import (
    CancelledError, Deferred, inlineCallbacks, maybeDeferred)
from twisted.internet.interfaces import (
    IAddress, IDelayedCall, IProtocol, IProtocolFactory, IReactorTime, IStreamClientEndpoint,
    ITCPTransport, ITransport)
from twisted.internet.protocol import Factory, Protocol, connectionDone
from twisted.logger import Logger
from twisted.python.failure import Failure
from txamqp.client import Closed, TwistedDelegate
from txamqp.message import Message
from txamqp.connection import Body, Frame, Header, Method
from txamqp.content import Content
from txamqp.protocol import AMQClient
from zope.interface import implementer

from pushengine import __version__
from pushengine.amqp.codec import FrameError, decode_frame, encode_frame
from pushengine.amqp.delivery import (
    DELIVER_PREFIX, FRAME_END, FRAME_METHOD, Delivery, Incoming, ack_frame, as_delivery,
    read_deliver)
from pushengine.amqp.spec import load_spec

log = Logger()
_frame_head = struct.Struct("!BHI")

NOT_FOUND = 404
PRECONDITION_FAILED = 406


class Channel(TypingProtocol):
    """What the feed uses of a txamqp channel (its methods are made from
    the AMQP spec at run time)."""

    id: int
    closed: bool

    def basic_ack(self, delivery_tag: int, multiple: bool) -> Deferred: ...

    def basic_publish(self, exchange: str, routing_key: str, content: Content) -> Deferred: ...

    def queue_declare(self, queue: str, passive: bool = False, durable: bool = False,
                      arguments: dict[str, Any] | None = None) -> Deferred: ...


class Consumer(TypingProtocol):
    """Takes the deliveries of one consumer tag (``FeedClient.consumers``):
    ``deliver`` for each message as it is read, ``deliveries_done`` once the
    bytes of one read are all parsed, so that the messages which arrived
    together can be applied together."""

    def deliver(self, delivery: Delivery) -> None: ...

    def deliveries_done(self) -> None: ...


class ClientListener(TypingProtocol):
    """What a ``FeedClient`` reports to."""

    def confirmed(self, channel: Channel, delivery_tag: int, multiple: bool,
                  ack: bool) -> None: ...

    def consumer_cancelled(self, channel: Channel, consumer_tag: str) -> None: ...

    def channel_failed(self, channel: Channel, reason: Failure) -> None: ...


def abort(transport: ITransport | None) -> None:
    """Drop a connection at once, without flushing what is queued (every
    transport the clients get is a TCP one)."""
    if transport is not None:
        cast(ITCPTransport, transport).abortConnection()


class FeedDelegate(TwistedDelegate):
    """txamqp's delegate plus the broker-sent methods of RabbitMQ's 0-9-1."""

    def connection_start(self, ch, msg):
        ch.connection_start_ok(client_properties=self.client.client_properties,
                               mechanism=self.client.mechanism,
                               response=self.client.response,
                               locale=self.client.locale)

    def basic_deliver(self, ch, msg):
        consumer = self.client.consumers.get(msg.consumer_tag)
        if consumer is not None:
            # a delivery that took txamqp's path (the lean one reads them
            # itself): a batch of one
            consumer.deliver(as_delivery(msg))
            consumer.deliveries_done()
            return None
        queue = self.client.queues.get(msg.consumer_tag)
        if queue is None:
            return super().basic_deliver(ch, msg)
        queue.put(msg)

    def basic_ack(self, ch, msg):
        self.client.report("confirmed", ch, msg.delivery_tag, msg.multiple, True)

    def basic_nack(self, ch, msg):
        self.client.report("confirmed", ch, msg.delivery_tag, msg.multiple, False)

    def basic_cancel(self, ch, msg):
        self.client.report("consumer_cancelled", ch, msg.consumer_tag)


class _Incoming:
    """A content-bearing method (basic.deliver) waiting for its header and
    body frames."""

    __slots__ = ("method", "properties", "size", "received", "parts")

    def __init__(self, method_payload: Method) -> None:
        self.method = method_payload
        self.properties: dict[str, Any] = {}
        self.size = -1
        self.received = 0
        self.parts: list[bytes] = []

    def add(self, payload: Header | Body) -> bool:
        """Take the next frame's payload; True once the content is whole."""
        if payload.type == Frame.HEADER and self.size < 0:
            self.properties = payload.properties
            self.size = payload.size
        elif payload.type == Frame.BODY and self.size >= 0:
            self.parts.append(payload.content)
            self.received += len(payload.content)
        else:
            raise FrameError(f"unexpected {payload.type} in the content of "
                             f"{self.method.method.klass.name}.{self.method.method.name}")
        return self.received >= self.size

    def message(self) -> Message:
        body = self.parts[0] if len(self.parts) == 1 else b"".join(self.parts)
        return Message(self.method.method, self.method.args,
                       Content(body, [], dict(self.properties)))


class FeedClient(AMQClient):
    """An ``AMQClient`` with a complete codec, hooks for confirms and
    cancels, and a synchronous receive path.

    txamqp routes every incoming frame through Deferreds, locks and
    inlineCallbacks (about thirty Deferreds per delivered message); that,
    not the broker, bounds the rate of a consumer.  Here frames are parsed
    from one buffer, broker-initiated methods (deliveries with their
    content, confirms, closes) are assembled and dispatched to the delegate
    at once, and only replies to our own calls take txamqp's path to the
    waiting ``invoke``.  Heartbeat timers are checked on expiry instead of
    being rescheduled for every frame.
    """

    checkHB: IDelayedCall       # txamqp's timer of the heartbeat check

    def __init__(self, vhost: str, heartbeat: int, clock: IReactorTime, connection_name: str,
                 listener: ClientListener | None = None) -> None:
        self._last_received = clock.seconds()
        super().__init__(FeedDelegate(), vhost, load_spec(),
                         heartbeat=heartbeat, clock=clock)
        self.clock: IReactorTime = clock
        self.listener = listener
        self._last_channel_id = 0
        self._close_reason: Failure | BaseException | None = None
        self._buffer = b""
        self._incoming: dict[int, _Incoming] = {}
        # consumer tag -> Consumer: its basic.deliver frames take the lean path
        self.consumers: dict[str, Consumer] = {}
        self._lean: dict[int, Incoming] = {}
        self.client_properties = {
            "product": "pushengine",
            "version": __version__,
            "platform": "Python/Twisted (txamqp)",
            "connection_name": connection_name,
            "capabilities": {
                "consumer_cancel_notify": True,
                "publisher_confirms": True,
                "basic.nack": True,
                "authentication_failure_close": True,
            },
        }

    # Receiving

    def dataReceived(self, data: bytes) -> None:
        """Parse every whole frame of the buffer; deliveries to a registered
        consumer are read by ``delivery`` and handed over as a batch at the
        end of the read, everything else goes through the codec."""
        # any bytes are traffic for the heartbeat check (a delivery's frames
        # may come over many reads before one is whole)
        self._last_received = self.clock.seconds()
        buf = self._buffer + data if self._buffer else data
        pos, end = 0, len(buf)
        lean = self._lean
        consumers = self.consumers
        touched: list[Consumer] = []
        try:
            while end - pos >= 8:
                frame_type, channel_id, size = _frame_head.unpack_from(buf, pos)
                stop = pos + 8 + size
                if stop > end:
                    break
                if consumers:
                    incoming = lean.get(channel_id) if lean else None
                    if incoming is not None or (
                            frame_type == FRAME_METHOD
                            and buf.startswith(DELIVER_PREFIX, pos + 7)):
                        if buf[stop - 1] != FRAME_END:
                            raise FrameError("frame does not end with the frame-end octet")
                        if incoming is None:
                            tag, delivery_tag, redelivered = read_deliver(
                                buf[pos + 7:stop - 1])
                            consumer = consumers.get(tag)
                            if consumer is not None:
                                pos = stop
                                lean[channel_id] = Incoming(
                                    consumer, Delivery(delivery_tag, redelivered))
                                continue
                        else:
                            payload = buf[pos + 7:stop - 1]
                            pos = stop
                            if incoming.add(frame_type, payload):
                                del lean[channel_id]
                                incoming.consumer.deliver(incoming.delivery)
                                if incoming.consumer not in touched:
                                    touched.append(incoming.consumer)
                            continue
                frame = decode_frame(self.spec, buf[pos:stop])
                pos = stop
                self.receive_frame(frame)
                if self.transport is None or self.transport.disconnecting:
                    break
        except (FrameError, struct.error, KeyError, ValueError, IndexError) as e:
            # A broker never sends this; one line is enough, then reconnect
            # (the messages of this read are not applied: they come again).
            log.error("AMQP protocol error, dropping the connection: {error}",
                      error=f"{type(e).__name__}: {e}")
            self._buffer = b""
            abort(self.transport)
            return
        self._buffer = buf[pos:]
        if touched:
            for consumer in touched:
                try:
                    consumer.deliveries_done()
                except Exception:
                    log.failure("AMQP: a consumer failed on its deliveries")

    def send_ack(self, channel_id: int, delivery_tag: int, multiple: bool = True) -> None:
        """``basic.ack`` written directly (it has no reply to wait for)."""
        if self.transport is not None:
            self.transport.write(ack_frame(channel_id, delivery_tag, multiple))

    def receive_frame(self, frame: Frame) -> None:
        """Handle one frame at once (txamqp's ``process_frame`` went through
        the channel lock and its work queue for every frame)."""
        self._last_received = self.clock.seconds()
        payload = frame.payload
        if payload.type == Frame.HEARTBEAT:
            return None
        channel = self.channels.get(frame.channel)
        if channel is None:
            # First frame on a channel not opened yet (connection.start on
            # channel 0): txamqp's path creates the channel.
            processed = super().process_frame(frame)
            processed.addErrback(
                lambda f: log.failure("AMQP: could not process a frame", f))
            return None
        incoming = self._incoming.get(frame.channel)
        if incoming is not None:
            if incoming.add(payload):
                del self._incoming[frame.channel]
                self._dispatch(channel, incoming.message())
            return None
        if payload.type == Frame.METHOD and not payload.method.response:
            if payload.method.content:
                self._incoming[frame.channel] = _Incoming(payload)
            else:
                self._dispatch(channel, Message(payload.method, payload.args))
            return None
        channel.dispatch(frame, self.work)
        return None

    def _dispatch(self, channel: Channel, message: Message) -> None:
        try:
            self.delegate.dispatch(channel, message)
        except Exception:
            # What txamqp's worker does with a failing handler: close.
            failure = Failure()
            log.failure("AMQP: handling {method} failed", failure,
                        method=f"{message.method.klass.name}.{message.method.name}")
            self.close(failure)

    # Heartbeats: checked when the timer expires, not rescheduled per frame.

    def reschedule_check_heartbeat(self) -> None:
        if self.heartbeatInterval > 0 and not self.checkHB.active():
            self.checkHB = self.clock.callLater(
                self.heartbeatInterval * self.MAX_UNSEEN_HEARTBEAT, self.check_heartbeat)

    def check_heartbeat(self) -> None:
        limit = self.heartbeatInterval * self.MAX_UNSEEN_HEARTBEAT
        idle = self.clock.seconds() - self._last_received
        if idle < limit:
            self.checkHB = self.clock.callLater(limit - idle, self.check_heartbeat)
            return
        log.warn("AMQP: nothing from the broker for {idle:.0f} s, dropping the "
                 "connection", idle=idle)
        abort(self.transport)

    def send_frame(self, frame: Frame) -> None:
        # Encoded by our codec. Heartbeats go out every interval whatever
        # else is sent (allowed by the spec); txamqp restarted its timer on
        # every frame sent.
        assert self.transport is not None
        self.transport.write(encode_frame(self.spec, frame))

    def do_close(self, reason: Failure | BaseException) -> None:
        # The first reason is the real one: the broker's connection.close
        # (e.g. "320 CONNECTION_FORCED") comes before the TCP close.
        if self._close_reason is None:
            self._close_reason = reason
        super().do_close(reason)

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        if self._close_reason is None:
            self._close_reason = reason
        super().connectionLost(reason)

    def loss_reason(self) -> str:
        """Why the connection closed, in one line."""
        if self._close_reason is None:
            return "unknown reason"
        return describe(self._close_reason)

    def report(self, event: str, *args: object) -> None:
        """Pass a broker event to the listener; a listener bug is logged."""
        if self.listener is None:
            return
        try:
            getattr(self.listener, event)(*args)
        except Exception:
            log.failure("AMQP client listener failed on {event}", event=event)

    def channel_failed(self, channel: Channel, reason: Failure) -> None:
        """The broker closed a channel (txamqp calls this)."""
        self.report("channel_failed", channel, reason)

    @inlineCallbacks
    def open_channel(self) -> Generator[Deferred, Any, Channel]:
        """Open a new channel on a fresh id (ids of closed channels are not reused)."""
        self._last_channel_id += 1
        channel = yield self.channel(self._last_channel_id)
        yield channel.channel_open()
        return channel


def reply_code(error: BaseException | Failure) -> int | None:
    """The AMQP reply code of a channel/connection close, if there is one."""
    value = error.value if isinstance(error, Failure) else error
    if isinstance(value, Message):
        message = value
    elif isinstance(value, Closed) and value.args and isinstance(value.args[0], Message):
        message = value.args[0]
    else:
        return None
    try:
        return message.reply_code
    except (AttributeError, KeyError):
        return None


def describe(reason: BaseException | Failure) -> str:
    """A one-line text for a connection failure, for the log."""
    error = reason.value if isinstance(reason, Failure) else reason
    message = error
    if isinstance(error, Closed) and error.args:
        message = error.args[0]
        if isinstance(message, Failure):
            message = message.value
    if isinstance(message, Message):
        try:
            return f"{message.reply_code} {message.reply_text}"
        except (AttributeError, KeyError):
            return str(message)
    if isinstance(message, BaseException):
        text = str(message) or type(message).__name__
        return text
    return str(message)


class _Relay(Protocol):
    """The transport's protocol: passes everything to ``target``.

    ``target`` is the txamqp client during the handshake, then the protocol
    ``ClientService`` built (which notifies it when the connection is lost).
    """

    def __init__(self, target: IProtocol) -> None:
        self.target = target
        self.closed: Deferred[None] = Deferred()

    def makeConnection(self, transport: ITransport) -> None:
        Protocol.makeConnection(self, transport)
        self.target.makeConnection(transport)

    def dataReceived(self, data: bytes) -> None:
        self.target.dataReceived(data)

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        try:
            self.target.connectionLost(reason)
        finally:
            self.closed.callback(None)


class ReadyClient(Protocol):
    """What ``ClientService`` holds: a handle on a client whose handshake
    is done; it passes data and the connection loss to the client."""

    def __init__(self, client: FeedClient) -> None:
        self.client = client

    def makeConnection(self, transport: ITransport) -> None:
        # The client has had this transport since the TCP connection was made.
        self.transport = transport
        self.connected = 1

    def dataReceived(self, data: bytes) -> None:
        self.client.dataReceived(data)

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        self.connected = 0
        self.client.connectionLost(reason)


class ReadyClientFactory(Factory):
    """The factory given to ``ClientService``; ``HandshakeEndpoint`` sets
    ``ready`` to the client just before the service builds its protocol."""

    noisy = False

    def __init__(self) -> None:
        self.ready: FeedClient | None = None

    def buildProtocol(self, addr: IAddress | None) -> ReadyClient | None:
        client, self.ready = self.ready, None
        if client is None:
            return None
        return ReadyClient(client)


@implementer(IStreamClientEndpoint)
class HandshakeEndpoint:
    """A client endpoint whose connection is made once the AMQP handshake is.

    ``build_client()`` makes a fresh ``FeedClient``; ``handshake(client)``
    brings it up (may return a Deferred) and must finish within
    ``handshake_timeout`` seconds.  ``connect(factory)`` needs the
    ``ReadyClientFactory`` given as ``ready_factory`` to be the one inside
    ``factory`` (``ClientService`` wraps it).  When the handshake fails the
    connection is aborted and ``connect`` fails once it is closed;
    ``on_failure(failure)`` sees every failed attempt.
    """

    def __init__(self, endpoint: IStreamClientEndpoint,
                 build_client: Callable[[], FeedClient],
                 handshake: Callable[[FeedClient], object],
                 ready_factory: ReadyClientFactory,
                 clock: IReactorTime,
                 handshake_timeout: float = 30.0,
                 on_failure: Callable[[Failure], None] | None = None) -> None:
        self._endpoint = endpoint
        self._build_client = build_client
        self._handshake = handshake
        self._ready_factory = ready_factory
        self._clock = clock
        self._handshake_timeout = handshake_timeout
        self._on_failure = on_failure

    def connect(self, protocol_factory: IProtocolFactory) -> Deferred[IProtocol]:
        client = self._build_client()
        relay = _Relay(client)
        step: dict[str, Deferred[Any] | None] = {"current": None}

        def cancel(result: Deferred[IProtocol]) -> None:
            current = step["current"]
            if current is not None and not current.called:
                current.cancel()
            abort(relay.transport)

        result: Deferred[IProtocol] = Deferred(canceller=cancel)

        def failed(failure: Failure) -> None:
            if relay.transport is not None and not relay.closed.called:
                # Report the failure once the connection is really closed, so
                # that ClientService never sees two connections at once.
                abort(relay.transport)
                done: Deferred[Any] = Deferred()
                relay.closed.addBoth(
                    lambda _: None if done.called else done.callback(None))
                done.addBoth(lambda _: failure)
                step["current"] = done
                done.addBoth(finish)
                return None
            finish(failure)
            return None

        def finish(outcome: IProtocol | Failure) -> None:
            if isinstance(outcome, Failure):
                if self._on_failure is not None and not outcome.check(CancelledError):
                    try:
                        self._on_failure(outcome)
                    except Exception:
                        log.failure("AMQP connection failure hook failed")
            if not result.called:
                if isinstance(outcome, Failure):
                    result.errback(outcome)
                else:
                    result.callback(outcome)
            elif not isinstance(outcome, Failure):
                # Cancelled while the handshake finished: drop the connection.
                abort(relay.transport)

        def tcp_connected(_relay: object) -> None:
            handshake = maybeDeferred(self._handshake, client)
            handshake.addTimeout(self._handshake_timeout, self._clock)
            step["current"] = handshake
            handshake.addCallbacks(ready, failed)
            handshake.addErrback(log_bug)

        def ready(_: object) -> None:
            transport = relay.transport
            assert transport is not None
            if result.called:
                abort(transport)
                return
            self._ready_factory.ready = client
            try:
                built = protocol_factory.buildProtocol(transport.getPeer())
            finally:
                self._ready_factory.ready = None
            if built is None:
                failed(Failure(RuntimeError("the protocol factory refused the connection")))
                return
            built.makeConnection(transport)
            relay.target = built
            finish(built)

        def log_bug(failure: Failure) -> None:
            log.failure("AMQP handshake bookkeeping failed", failure)

        factory = Factory.forProtocol(lambda: relay)
        factory.noisy = False
        connecting = self._endpoint.connect(factory)
        step["current"] = connecting
        connecting.addCallbacks(tcp_connected, finish)
        connecting.addErrback(log_bug)
        return result
