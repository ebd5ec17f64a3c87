"""Event frames shared by the WebSockets at the same position
(``websocket.SharedFrames``): the bytes are those a socket would make alone,
a client library reads them, plain and permessage-deflate, they are built
once per batch and kind, and the cache stays within its caps. A closed
socket is freed at once, without the garbage collector."""
from __future__ import annotations

import gc
import json
import weakref

from hypothesis import given, settings, strategies as st
from twisted.internet.error import ConnectionDone
from twisted.python.failure import Failure
from wsproto import ConnectionType
from wsproto.connection import Connection
from wsproto.events import TextMessage
from wsproto.extensions import PerMessageDeflate

from pushengine.core.events import DROPPED, Fragment
from pushengine.transports.deflate import Deflater
from pushengine.transports.websocket import SharedFrames, events_frame
from pushengine.web.sendnow import send_now
from tests.http.harness import ClockNode
from tests.transports.test_ws_raw import Client, publish

fragment = st.builds(lambda t: Fragment('"key":%s,"action":"add"}' % json.dumps(t)),
                     st.text(max_size=300))
fragments = st.lists(st.one_of(st.just(DROPPED), fragment), min_size=1, max_size=6)


def client(wbits: int | None) -> Connection:
    """A wsproto client that negotiated what the server answers: no
    compression, or permessage-deflate of a window of ``wbits``."""
    if wbits is None:
        return Connection(ConnectionType.CLIENT)
    ext = PerMessageDeflate()
    ext.finalize(f"server_no_context_takeover; server_max_window_bits={wbits}")
    return Connection(ConnectionType.CLIENT, [ext])


def read(conn: Connection, data: bytes) -> list:
    conn.receive_data(data)
    return [json.loads(e.data) for e in conn.events() if isinstance(e, TextMessage)]


def expected(first: int, frags: list) -> list:
    return [{"jsonrpc": "2.0", "method": "events",
             "params": [json.loads('{"seq":%d,%s' % (seq, f))
                        for seq, f in enumerate(frags, first) if f is not DROPPED]}]


@settings(max_examples=150, deadline=None)
@given(first=st.integers(1, 2**40), frags=fragments,
       wbits=st.one_of(st.none(), st.integers(9, 15)))
def test_a_shared_frame_is_what_a_socket_makes_alone_and_a_client_reads_it(first, frags, wbits):
    deflater = Deflater.of(wbits) if wbits is not None else None
    frames = SharedFrames()
    made = frames.frame(deflater, first, frags)
    if deflater is None:
        assert made == events_frame(first, frags)
    # a second socket at the same position gets the same object
    assert frames.frame(deflater, first, list(frags)) is made
    assert (frames.made, frames.reused) == (1, 1)
    assert read(client(wbits), made) == expected(first, frags)


def test_each_kind_has_its_own_frame_and_another_position_another() -> None:
    frames = SharedFrames()
    f = [Fragment('"key":"v","action":"update","obj":{"n":%d}}' % n) for n in range(3)]
    plain = frames.frame(None, 5, f)
    small, large = frames.frame(Deflater.of(9), 5, f), frames.frame(Deflater.of(15), 5, f)
    assert plain[0] == 0x81 and small[0] == large[0] == 0xC1
    assert frames.frame(None, 6, f) != plain
    assert frames.made == 4 and frames.reused == 0
    assert read(client(9), small) == read(client(15), large) == read(client(None), plain)


@settings(max_examples=200, deadline=None)
@given(cap=st.integers(1, 6), max_bytes=st.integers(16, 2000),
       batches=st.lists(st.tuples(st.integers(1, 8), st.integers(0, 3),
                                  st.one_of(st.none(), st.integers(9, 15))), max_size=60))
def test_the_cache_never_holds_more_than_its_caps(cap, max_bytes, batches):
    """Invariant: at most ``max_batches`` frames and ``max_bytes`` bytes are
    kept, the size counted is the frames' own, and each answer is right."""
    pool = [Fragment('"key":"v","action":"update","obj":{"n":%s}}' % ("7" * (40 * n + 1)))
            for n in range(4)]
    frames = SharedFrames(cap, max_bytes)
    for first, n, wbits in batches:
        deflater = Deflater.of(wbits) if wbits is not None else None
        made = frames.frame(deflater, first, pool[:n + 1])
        assert read(client(wbits), made) == expected(first, pool[:n + 1])
        assert len(frames) <= cap and frames.size <= max_bytes
        assert frames.size == sum(len(v) for v in frames._frames.values())


def test_many_sockets_of_a_view_share_one_frame_per_change() -> None:
    node = ClockNode("--max-client-connections", "0", "--max-client-sessions", "0")
    clients = [Client(node) for _ in range(5)]
    for c in clients:
        sid = c.call("session.create")["result"]
        assert c.call("stream.subscribe_public_live", sid, 10)["result"]
    frames = clients[0].socket.frames
    assert all(c.socket.frames is frames for c in clients)
    # the fast front's socket sends at once when nothing waits in its buffer
    assert all(c.socket.send is send_now for c in clients)
    made = frames.made
    publish(node, 1)
    publish(node, 2)
    assert frames.made - made == 2 and frames.reused >= 8
    assert all(c.pushed() == [1, 2] for c in clients)


def test_deflate_sockets_share_compressed_frames_and_decode_them() -> None:
    node = ClockNode("--max-client-connections", "0", "--max-client-sessions", "0")
    offer = {"Sec-WebSocket-Extensions": "permessage-deflate; server_max_window_bits=10"}
    clients = [Client(node, headers=offer) for _ in range(3)] + [Client(node)]
    for c in clients[:3]:
        assert b"server_max_window_bits=10" in c.head()
        c.ws = client(10)
    for c in clients:
        sid = c.call("session.create")["result"]
        assert c.call("stream.subscribe_public_live", sid, 10)["result"]
    frames = clients[0].socket.frames
    made = frames.made
    publish(node, 1, 2)
    node.clock.advance(0)
    assert frames.made - made == 2           # one compressed, one plain
    assert all(c.pushed() == [1, 2] for c in clients)
    titles = [[e["obj"]["title"] for m in c.inbox if m.get("method") == "events"
               for e in m["params"]] for c in clients]
    assert all(t == titles[-1] for t in titles) and "stream 1" in titles[-1]


def test_a_closed_socket_is_freed_without_the_collector() -> None:
    node = ClockNode("--max-client-connections", "0")
    c = Client(node)
    sid = c.call("session.create")["result"]
    c.call("stream.subscribe_public_live", sid, 10)
    publish(node, 1)
    assert c.pushed() == [1]
    gc.collect()
    gc.disable()
    try:
        gone = weakref.ref(c.socket)
        c.raw.transport.protocol.connectionLost(Failure(ConnectionDone()))
        node.clock.advance(0)
        del c
        assert gone() is None, gc.get_referrers(gone())
    finally:
        gc.enable()


@settings(max_examples=50, deadline=None)
@given(first=st.integers(1, 2**20), frags=fragments,
       wbits=st.one_of(st.none(), st.integers(9, 15)))
def test_a_socket_without_shared_frames_writes_the_same_bytes(first, frags, wbits):
    from twisted.internet.task import Clock
    from twisted.internet.testing import StringTransport

    from pushengine.transports.deflate import ServerDeflate
    from pushengine.transports.websocket import WsConnection
    sockets = []
    for frames in (None, SharedFrames()):
        deflate = None
        if wbits is not None:
            deflate = ServerDeflate(1 << 20)
            deflate.accept(f"permessage-deflate; server_max_window_bits={wbits}")
        ws = WsConnection(None, None, None, Clock(), 1 << 20, None, None, deflate, None, frames)
        ws.transport = StringTransport()
        ws.write(first, frags)
        sockets.append(ws.transport.value())
    assert sockets[0] == sockets[1]
    assert read(client(wbits), sockets[0]) == expected(first, frags)
