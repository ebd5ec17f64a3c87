"""Each transport when the node shuts down (SPEC 21), in process on a Clock.

The node's ``Shutdown`` tells the HTTP connections, then each transport, to
let their clients go (``close_all``): here each is told directly, the
connections first as the shutdown does, and what the client's side of a
``StringTransport`` received is read. A connection's end is the test's to
say (``connectionLost``), as the socket would.
"""
from __future__ import annotations

import json
from typing import Any

import pytest
from twisted.internet.defer import Deferred
from twisted.internet.error import ConnectionDone
from twisted.python.failure import Failure
from wsproto.events import CloseConnection, TextMessage

from pushengine.api.rpc import RpcAnswer
from pushengine.transports.websocket import CLOSE_LINGER
from tests.deferreds import fired, pending
from tests.http.harness import ClockNode, Raw, http_request
from tests.transports.test_sse_raw import events_in, get_events, publish, session, split
from tests.transports.test_ws_raw import Client

REASON = "the node is shutting down"
GOING_AWAY = b'event: going-away\ndata: {"code":1001,"reason":"the node is shutting down"}\n\n'


def lost(protocol: Any) -> None:
    protocol.connectionLost(Failure(ConnectionDone()))


def rpc(method: str, *params: Any) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": 1, "method": method,
                       "params": list(params)}).encode()


def let_go(node: ClockNode, transport: Any) -> Deferred:
    """What the shutdown does for one transport: the connections finish
    up first, then the transport lets its clients go."""
    node.connections.close_all(REASON)
    return transport.close_all(REASON)


# -- long-polling ---------------------------------------------------------------------

@pytest.mark.parametrize("front", ["fast", "twisted"])
def test_a_parked_poll_answers_empty_and_its_connection_closes(front: str) -> None:
    node = ClockNode("--http", front)
    sid = session(node)
    raw = Raw(node.http_factory())
    raw.send(http_request("POST", "/api/jsonrpc", rpc("session.get_events", sid, 60),
                          {"Content-Type": "application/json"}))
    assert node.engine.sessions.waiting == 1 and raw.responses() == []
    assert fired(let_go(node, node.poller)) is None
    node.clock.advance(0)
    answer = raw.response()
    assert answer.code == 200 and answer.json() == {"jsonrpc": "2.0", "id": 1, "result": []}
    assert answer.header("connection") == "close"
    assert raw.closing
    assert node.engine.sessions.waiting == 0
    assert sid in node.engine.sessions.sessions        # the session stays


def test_a_poll_after_the_shutdown_began_answers_at_once() -> None:
    node = ClockNode()
    sid = session(node)
    node.poller.close_all(REASON)
    raw = Raw(node.http_factory())
    raw.send(http_request("POST", "/api/jsonrpc", rpc("session.get_events", sid, 60),
                          {"Content-Type": "application/json"}))
    node.clock.advance(0)
    assert raw.response().json()["result"] == []
    assert node.engine.sessions.waiting == 0


# -- the HTTP connections ---------------------------------------------------------------

@pytest.mark.parametrize("front", ["fast", "twisted"])
def test_an_idle_connection_closes_at_once_and_a_busy_one_after_its_answer(front: str) -> None:
    node = ClockNode("--http", front)
    idle = Raw(node.http_factory())
    idle.send(http_request("GET", "/health/live"))
    busy = Raw(node.http_factory())
    # a call whose body has not all come: in flight
    call = b'{"jsonrpc":"2.0","id":7,"method":"session.create","params":[]}'
    busy.send(http_request("POST", "/api/jsonrpc", call[:10], length=len(call),
                           headers={"Content-Type": "application/json"}))
    assert len(node.connections) == 2
    done = node.connections.close_all(REASON)
    assert idle.closing and not busy.closing and pending(done)
    busy.send(call[10:])
    node.clock.advance(0)
    answer = busy.response()
    assert answer.code == 200 and "result" in answer.json()
    assert answer.header("connection") == "close" and busy.closing
    lost(idle.protocol)
    assert pending(done)
    lost(busy.protocol)
    assert fired(done) is None


def test_a_connection_cut_at_the_deadline() -> None:
    node = ClockNode()
    raw = Raw(node.http_factory())
    raw.send(http_request("POST", "/api/jsonrpc", b"{", length=50))
    node.connections.close_all(REASON)
    node.connections.abort_all()
    assert raw.transport.disconnecting and raw.responses() == []


# -- SSE --------------------------------------------------------------------------------

@pytest.mark.parametrize("front", ["fast", "twisted"])
def test_a_stream_writes_what_waits_then_going_away_then_ends(front: str) -> None:
    node = ClockNode("--http", front)
    sid = session(node)
    raw = Raw(node.http_factory())
    raw.send(get_events(f"session={sid}"))
    publish(node, 1)
    raw.transport.producer.pauseProducing()    # a client that reads slowly
    publish(node, 2)
    done = let_go(node, node.sse)
    data = raw.transport.value()
    head, chunks = split(data)
    assert data.endswith(b"0\r\n\r\n")        # the chunked body terminated
    body = b"".join(chunks)
    # at a message's boundary: the events, then the going-away message, last
    assert [e["seq"] for e in events_in(chunks) if "seq" in e] == [1, 2]
    assert body.endswith(b"\n\n" + GOING_AWAY)
    assert raw.closing
    assert node.engine.sessions.get(sid).delivery is None      # detached, kept
    assert node.engine.sessions.streams == 0
    if front == "fast":
        # the stream holds the connection: it is gone when the socket says so
        assert pending(done)
        lost(raw.protocol)
    else:
        # twisted.web's answer is finished; the connection is the front's
        assert len(node.connections) == 1
        lost(raw.protocol)
        assert len(node.connections) == 0
    assert fired(done) is None


def test_a_stream_opened_while_the_node_shuts_down_ends_at_once() -> None:
    node = ClockNode()
    sid = session(node)
    node.sse.close_all(REASON)
    raw = Raw(node.http_factory())
    raw.send(get_events(f"session={sid}"))
    head, chunks = split(raw.transport.value())
    assert head.startswith(b"HTTP/1.1 200") and b"".join(chunks).endswith(GOING_AWAY)
    assert raw.closing


def test_a_stream_cut_at_the_deadline() -> None:
    node = ClockNode()
    sid = session(node)
    raw = Raw(node.http_factory())
    raw.send(get_events(f"session={sid}"))
    done = node.sse.close_all(REASON)
    node.sse.abort_all()
    assert raw.transport.disconnecting and pending(done)


# -- WebSocket --------------------------------------------------------------------------

def closes(client: Client) -> list[CloseConnection]:
    return [e for e in client.events() if isinstance(e, CloseConnection)]


def test_a_socket_writes_what_waits_then_closes_with_1001() -> None:
    node = ClockNode()
    c = Client(node)
    sid = c.call("session.create")["result"]
    c.call("stream.subscribe_public_live", sid, 10)
    publish(node, 1)
    c.raw.transport.producer.pauseProducing()       # a client that reads slowly
    publish(node, 2)
    done = let_go(node, node.ws)
    frames = c.events()
    pushed = [e["seq"] for f in frames if isinstance(f, TextMessage)
              for e in json.loads(f.data)["params"]]
    assert pushed == [1, 2]                         # what waited went first
    assert isinstance(frames[-1], CloseConnection) and frames[-1].code == 1001
    assert c.socket.closed and not c.raw.closing   # waits for the client's close frame
    assert node.engine.sessions.get(sid).delivery is None      # detached, kept
    assert pending(done)


def test_a_socket_closes_its_connection_when_the_client_answers_the_close() -> None:
    node = ClockNode()
    c = Client(node)
    c.call("session.create")
    done = let_go(node, node.ws)
    [close] = closes(c)
    assert (close.code, close.reason) == (1001, REASON)
    assert not c.raw.closing
    c.raw.transport.protocol.dataReceived(c.ws.send(close.response()))
    assert c.raw.closing
    lost(c.raw.transport.protocol)
    assert fired(done) is None


def test_a_socket_whose_client_does_not_answer_closes_after_the_linger() -> None:
    node = ClockNode()
    c = Client(node)
    c.call("session.create")
    let_go(node, node.ws)
    assert closes(c)[0].code == 1001
    node.clock.advance(CLOSE_LINGER - 0.1)
    assert not c.raw.closing
    node.clock.advance(0.2)
    assert c.raw.closing


class HeldCalls:
    """The node's dispatcher, except that ``held.call`` answers when
    the test says (a call in flight)."""

    def __init__(self, dispatcher: Any) -> None:
        self.dispatcher = dispatcher
        self.held: list[Deferred] = []

    def handle(self, body: bytes, caller: Any, *rest: Any) -> Any:
        if b"held.call" in body:
            d: Deferred = Deferred()
            self.held.append(d)
            return d
        return self.dispatcher.handle(body, caller, *rest)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.dispatcher, name)


def test_a_socket_answers_its_calls_in_flight_before_it_closes() -> None:
    node = ClockNode()
    node.ws.dispatcher = calls = HeldCalls(node.ws.dispatcher)
    c = Client(node)
    sid = c.call("session.create")["result"]
    c.call("stream.subscribe_public_live", sid, 10)
    c.raw.transport.protocol.dataReceived(c.frame("held.call"))
    assert len(calls.held) == 1
    done = let_go(node, node.ws)
    publish(node, 3)
    assert closes(c) == [] and c.messages() == []   # the answer first
    calls.held[0].callback(RpcAnswer(b'{"jsonrpc":"2.0","id":3,"result":"late"}'))
    frames = c.events()
    assert json.loads(frames[0].data) == {"jsonrpc": "2.0", "id": 3, "result": "late"}
    assert [e["seq"] for e in json.loads(frames[1].data)["params"]] == [1]
    assert isinstance(frames[-1], CloseConnection) and frames[-1].code == 1001
    assert pending(done)


def test_a_socket_opened_while_the_node_shuts_down_closes_at_once() -> None:
    node = ClockNode()
    node.ws.close_all(REASON)
    c = Client(node)
    assert closes(c)[0].code == 1001


def test_a_socket_cut_at_the_deadline() -> None:
    node = ClockNode()
    c = Client(node)
    c.call("session.create")
    done = node.ws.close_all(REASON)
    node.ws.abort_all()
    assert c.raw.transport.disconnecting and pending(done)
