"""A WebSocket's budgets on a Clock (transports/websocket.py): input in slices,
the unsent bytes bound that stops reading, the idle close, invalid input
counted against the call rate, the attach answer before the replayed events,
and permessage-deflate checked against zlib itself."""
from __future__ import annotations

import zlib
from typing import Any

from hypothesis import given, settings, strategies as st
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from wsproto import ConnectionType, WSConnection
from wsproto.connection import Connection
from wsproto.events import CloseConnection, Ping, TextMessage
from wsproto.frame_protocol import FrameProtocol

from pushengine.api.rpc import RpcAnswer
from pushengine.core.events import DROPPED, Fragment
from pushengine.core.limits import CallRate
from pushengine.transports.deflate import Deflater, ServerDeflate
from pushengine.transports.heartbeat import Heartbeat
from pushengine.transports.websocket import (
    REFUSALS, SLICE_MESSAGES, WsConnection)


class Dispatcher:
    """Answers every call at once; counts them."""

    def __init__(self, rate: CallRate | None = None) -> None:
        self.calls: list[bytes] = []
        self.rate = rate
        self.admit = (lambda caller, n: rate.admit("c", n)) if rate else None

    def handle(self, body: bytes, caller: Any) -> RpcAnswer:
        self.calls.append(body)
        if self.admit is not None and self.admit(caller, 1) > 0:
            return RpcAnswer(b'{"jsonrpc":"2.0","id":null,"error":{"code":1007}}', 429, 1.0)
        return RpcAnswer(b'{"jsonrpc":"2.0","id":1,"result":true}')


class Request:
    def unregisterProducer(self) -> None:
        pass


def connect(dispatcher: Any = None, clock: Clock | None = None, max_message: int = 1 << 20,
            heartbeat: Heartbeat | None = None, idle: float | None = None,
            deflate: ServerDeflate | None = None) -> tuple[WsConnection, StringTransport, Clock]:
    clock = clock or Clock()
    conn = Connection(ConnectionType.SERVER, [deflate] if deflate else None)
    ws = WsConnection(conn, dispatcher or Dispatcher(), None, clock, max_message, Request(),
                      heartbeat, deflate, idle)
    transport = StringTransport()
    ws.makeConnection(transport)
    return ws, transport, clock


def client_frames(*messages: Any) -> bytes:
    c = Connection(ConnectionType.CLIENT)
    return b"".join(c.send(m) for m in messages)


def slice_sizes(ws, d) -> list[int]:
    """How many calls each later slice of ``ws`` handles, as it runs."""
    sizes: list[int] = []

    class Spied(WsConnection):
        __slots__ = ()                     # the connection keeps its state in slots

        def _slice(self) -> None:
            before = len(d.calls)
            super()._slice()
            sizes.append(len(d.calls) - before)
    ws.__class__ = Spied
    return sizes


def test_a_flood_of_frames_is_handled_in_slices_with_reading_paused_between():
    d = Dispatcher()
    ws, transport, clock = connect(d)
    ws.dataReceived(client_frames(*[TextMessage("[]") for _ in range(10 * SLICE_MESSAGES)]))
    assert len(d.calls) == SLICE_MESSAGES
    assert transport.producerState == "paused"
    sizes = slice_sizes(ws, d)
    clock.advance(0)
    assert len(d.calls) == 10 * SLICE_MESSAGES
    assert max(sizes) <= SLICE_MESSAGES and len(sizes) >= 9
    assert transport.producerState == "producing"


def test_a_client_that_does_not_read_is_not_read_from_until_its_socket_drains():
    d = Dispatcher()
    ws, transport, clock = connect(d)
    ws.pauseProducing()          # the transport: unsent bytes above its bound
    assert transport.producerState == "paused"
    before = len(transport.value())
    ws.dataReceived(client_frames(*[Ping(b"x" * 125) for _ in range(1000)]))
    assert len(transport.value()) == before        # no pong buffered
    ws.resumeProducing()
    clock.advance(0)
    assert len(transport.value()) > before


def test_invalid_input_counts_against_the_rate_and_a_client_going_on_is_closed():
    rate = CallRate(Clock(), 10.0)
    ws, transport, clock = connect(Dispatcher(rate))
    for _ in range(REFUSALS + 40):
        ws.dataReceived(client_frames(TextMessage("{nope")))
        clock.advance(0)
    assert b'"code":1007' in transport.value()
    assert ws.closed and transport.disconnecting
    assert b"\x03\xf0" in transport.value()        # close code 1008


def test_binary_frames_count_against_the_rate():
    rate = CallRate(Clock(), 1.0)
    d = Dispatcher(rate)
    ws, transport, clock = connect(d)
    from wsproto.events import BytesMessage
    for _ in range(5):
        ws.dataReceived(client_frames(BytesMessage(b"\x00")))
    assert b'"code":1007' in transport.value()


def test_a_socket_with_no_session_that_answers_no_ping_is_closed_after_the_idle_timeout():
    clock = Clock()
    beat = Heartbeat(clock, 30.0)
    ws, transport, _ = connect(clock=clock, heartbeat=beat, idle=60.0)
    for _ in range(20):
        clock.advance(10.0)
    assert ws.closed and transport.disconnecting


def test_a_socket_that_answers_pings_stays_open():
    clock = Clock()
    beat = Heartbeat(clock, 30.0)
    ws, transport, _ = connect(clock=clock, heartbeat=beat, idle=60.0)
    client = Connection(ConnectionType.CLIENT)
    for _ in range(20):
        clock.advance(10.0)
        ws.dataReceived(client.send(Ping(b"").response()))
    assert not ws.closed


def test_the_message_limit_counts_bytes_not_characters():
    ws, transport, clock = connect(max_message=1000)
    ws.dataReceived(client_frames(TextMessage("é" * 600)))     # 1200 bytes
    assert ws.closed and b"\x03\xf1" in transport.value()      # 1009


def test_a_compressed_bomb_is_refused_with_1009_before_it_is_inflated():
    deflate = ServerDeflate(1 << 16)
    assert deflate.accept("permessage-deflate") == "server_no_context_takeover"
    ws, transport, clock = connect(max_message=1 << 16, deflate=deflate)
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    payload = c.compress(b" " * (64 << 20)) + c.flush(zlib.Z_SYNC_FLUSH)
    payload = payload[:-4]
    frame = FrameProtocol(client=True, extensions=[])
    # RSV1 set by hand: a client's compressed text frame
    raw = frame.send_data(payload, fin=True)
    raw = bytes([raw[0] | 0x40]) + raw[1:]
    ws.dataReceived(raw)
    assert ws.closed and b"\x03\xf1" in transport.value()


class FakeLog:
    def __init__(self) -> None:
        self.pending = 1

    def write(self, write: Any) -> int:
        write(1, [Fragment('"key":"k","action":"add"}')])
        self.pending = 0
        return 1


class FakeSession:
    def __init__(self) -> None:
        self.log = FakeLog()


class Sessions:
    events_out = 0

    def __init__(self, ws: Any = None) -> None:
        self.ws = ws

    def resume_writing(self, session: Any, delivery: Any) -> None:
        if session.log.pending:
            delivery.notify(session)

    def detach(self, session: Any, delivery: Any) -> None:
        pass


class AttachingDispatcher:
    admit = None

    def __init__(self) -> None:
        self.ws: Any = None

    def handle(self, body: bytes, caller: Any) -> RpcAnswer:
        self.ws.switch_to(FakeSession())     # as session.attach does, before answering
        return RpcAnswer(b'{"jsonrpc":"2.0","id":1,"result":true}')


def test_the_attach_answer_comes_before_the_replayed_events():
    d = AttachingDispatcher()
    ws, transport, clock = connect(d)
    ws.sessions = Sessions()
    d.ws = ws
    ws.dataReceived(client_frames(TextMessage('{"jsonrpc":"2.0","id":1,'
                                              '"method":"session.attach","params":["s",0]}')))
    client = WSConnection(ConnectionType.CLIENT)
    client._connection = Connection(ConnectionType.CLIENT)
    client._connection.receive_data(transport.value())
    texts = [e.data for e in client._connection.events() if isinstance(e, TextMessage)]
    assert '"result":true' in texts[0] and '"method":"events"' in texts[1]


fragments = st.lists(st.one_of(st.just(DROPPED), st.builds(
    lambda t: Fragment('"key":%s,"action":"add"}' % __import__("json").dumps(t)),
    st.text(max_size=300))), min_size=1, max_size=8)


@settings(max_examples=200, deadline=None)
@given(first=st.integers(1, 2**40), frags=fragments, wbits=st.integers(9, 15))
def test_a_compressed_events_message_inflates_to_the_plain_one(first, frags, wbits):
    """Invariant: the pieces compressed apart, with stored blocks between,
    are one deflate stream a standard inflater reads as the plain message
    (and the shared piece is made once per fragment and window)."""
    from pushengine.transports.websocket import events_frame, text_frame
    plain = events_frame(first, frags)
    payload = Deflater.of(wbits).events(first, frags)
    if payload is None:
        assert all(f is DROPPED for f in frags)
        return
    inflated = zlib.decompressobj(-wbits).decompress(payload + b"\x00\x00\xff\xff")
    assert text_frame(inflated) == plain
    for f in frags:
        if f is not DROPPED:
            assert f.deflated is not None and wbits in f.deflated


@settings(max_examples=50, deadline=None)
@given(offer=st.text(alphabet="permsagdflt-_;= 0123456789wbixcnovrkz", max_size=80))
def test_any_extension_offer_is_answered_or_declined_never_raised(offer):
    answer = ServerDeflate(1000).accept("permessage-deflate;" + offer)
    assert answer is None or answer.startswith("server_no_context_takeover")


@settings(max_examples=100, deadline=None)
@given(texts=st.lists(st.text(max_size=40), min_size=1, max_size=120),
       cuts=st.lists(st.integers(0, 4000), max_size=10))
def test_every_message_is_handled_once_in_order_whatever_the_reads(texts, cuts):
    """Invariant of the slices: however the bytes arrive, each message is
    handled once, in order, no turn handles more than a slice, and reading
    is on again once everything is handled."""
    d = Dispatcher()
    ws, transport, clock = connect(d)
    sizes = slice_sizes(ws, d)
    data = client_frames(*[TextMessage(t) for t in texts])
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    for a, b in zip(points, points[1:]):
        if ws.reading or transport.producerState == "producing":
            ws.dataReceived(data[a:b])
        else:                              # paused: the kernel keeps it until read
            clock.advance(0)
            ws.dataReceived(data[a:b])
    clock.advance(0)
    assert d.calls == [t.encode("utf-8") for t in texts]
    assert max(sizes, default=0) <= SLICE_MESSAGES
    assert ws.reading and transport.producerState == "producing"
