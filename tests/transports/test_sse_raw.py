"""SSE on the fast front, written on the raw connection (SPEC section 10).

``GET /api/events`` is not relayed to twisted.web: the fast front hands the
connection to the SSE stream, which writes the head and each message
straight to the socket. These tests feed the front raw bytes on a
``StringTransport`` with the node on a ``Clock`` and read what it wrote.
"""
from __future__ import annotations

import json

import pytest
from twisted.internet.error import ConnectionDone
from twisted.python.failure import Failure

from pushengine.core.changes import Change
from pushengine.transports.sse import SseStream
from tests.http.harness import ClockNode, Http, Raw, Rpc, http_request


def stream_obj(id_: int) -> dict:
    return {"id": id_, "title": f"stream {id_}", "user_id": 1, "live": True, "public": True,
            "created_at": f"2026-01-01T00:00:{id_ % 60:02d}Z"}


def publish(node: ClockNode, *ids: int) -> None:
    node.engine.apply_changes([Change("Stream", "upsert", i, stream_obj(i)) for i in ids])


def session(node: ClockNode) -> str:
    http = Http(node.web.resource())
    key = {"X-Api-Key": "k1"}
    sid = Rpc.unwrap(http.post("/api/jsonrpc", Rpc(http).body("session.create"), key).json())
    Rpc.unwrap(http.post("/api/jsonrpc", Rpc(http).body(
        "stream.subscribe_public_live", [sid, 10]), key).json())
    return sid


def alive(node: ClockNode, sid: str) -> bool:
    return sid in node.engine.sessions.sessions


def get_events(query: str, headers: dict | None = None, version: str = "1.1") -> bytes:
    lines = [f"GET /api/events?{query} HTTP/{version}", "Host: 127.0.0.1"]
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def split(data: bytes) -> tuple[bytes, list[bytes]]:
    """The head of a chunked answer and its chunks' bodies."""
    head, _, rest = data.partition(b"\r\n\r\n")
    chunks = []
    while rest:
        size, _, rest = rest.partition(b"\r\n")
        n = int(size, 16)
        chunks.append(rest[:n])
        assert rest[n:n + 2] == b"\r\n"
        rest = rest[n + 2:]
    return head, chunks


def headers_of(head: bytes) -> dict[bytes, bytes]:
    lines = head.split(b"\r\n")[1:]
    return {k.strip().lower(): v.strip() for k, _, v in (line.partition(b":") for line in lines)}


def events_in(chunks: list[bytes]) -> list[dict]:
    out = []
    for chunk in chunks:
        for block in chunk.split(b"\n\n"):
            for line in block.split(b"\n"):
                if line.startswith(b"data: "):
                    out.append(json.loads(line[6:]))
    return out


def open_stream(node: ClockNode, query: str, headers: dict | None = None,
                version: str = "1.1") -> Raw:
    raw = Raw(node.http_factory())
    raw.send(get_events(query, headers, version))
    return raw


def test_the_head_then_an_open_comment_on_the_raw_connection() -> None:
    node = ClockNode("--cors-origin", "https://app.example")
    sid = session(node)
    raw = open_stream(node, f"session={sid}")
    head, chunks = split(raw.transport.value())
    assert head.startswith(b"HTTP/1.1 200 OK\r\n")
    h = headers_of(head)
    assert h[b"content-type"] == b"text/event-stream"
    assert h[b"cache-control"] == b"no-store"
    assert h[b"transfer-encoding"] == b"chunked"
    assert h[b"access-control-allow-origin"] == b"https://app.example"
    assert b"date" in h and b"content-length" not in h
    assert chunks == [b": open\n\n"]
    channel = raw.protocol
    # no twisted.web channel, no parser, no request kept for the stream
    assert channel.behind is None and channel.parser is None and channel.request is None
    assert isinstance(channel.stream, SseStream)
    assert node.engine.sessions.get(sid).delivery is channel.stream


def test_events_follow_the_first_with_the_retry_then_pings() -> None:
    node = ClockNode()
    sid = session(node)
    raw = open_stream(node, f"session={sid}")
    publish(node, 1)
    publish(node, 2)
    _, chunks = split(raw.transport.value())
    assert chunks[1].startswith(b"retry: 3000\nid: 1\ndata: {")
    assert chunks[2].startswith(b"id: 2\ndata: {")
    assert [e["seq"] for e in events_in(chunks)] == [1, 2]
    assert sum(c.count(b"retry:") for c in chunks) == 1
    # SPEC section 10: a ": ping" comment after 15 s of silence (within
    # the heartbeat's one-second step), then again after each 15 s more
    node.clock.pump([0.25] * 59)                    # 14.75 s
    _, chunks = split(raw.transport.value())
    assert chunks[-1] != b": ping\n\n"
    node.clock.pump([0.25] * 5)                     # 16 s
    _, chunks = split(raw.transport.value())
    assert chunks[-1] == b": ping\n\n"
    node.clock.pump([0.25] * 60)                    # 31 s
    _, chunks = split(raw.transport.value())
    assert chunks[-2:] == [b": ping\n\n"] * 2


def test_the_pings_are_counted_in_metrics() -> None:
    node = ClockNode()
    sid = session(node)
    open_stream(node, f"session={sid}")

    def pings() -> dict[str, float]:
        text = Http(node.web.resource()).get("/metrics").body.decode()
        return {line.split("{")[0]: float(line.split()[1]) for line in text.splitlines()
                if line.startswith("pushengine_pings_")}

    assert pings() == {"pushengine_pings_sse_total": 0.0, "pushengine_pings_ws_total": 0.0}
    node.clock.pump([0.5] * 32)                     # 16 s of silence: one ping
    assert pings() == {"pushengine_pings_sse_total": 1.0, "pushengine_pings_ws_total": 0.0}


@pytest.mark.parametrize("how", ["header", "query"])
def test_resume_after_the_last_event_id(how: str) -> None:
    node = ClockNode()
    sid = session(node)
    first = open_stream(node, f"session={sid}")
    publish(node, 1, 2, 3)
    first.protocol.connectionLost(Failure(ConnectionDone()))
    if how == "header":
        again = open_stream(node, f"session={sid}", {"Last-Event-ID": "1"})
    else:
        again = open_stream(node, f"session={sid}&last_event_id=1")
    _, chunks = split(again.transport.value())
    assert [e["seq"] for e in events_in(chunks)] == [2, 3]


def refusal(front: str, query: str, *argv: str, headers: dict | None = None):
    node = ClockNode("--http", front, *argv)
    sid = session(node)
    raw = Raw(node.http_factory())
    raw.send(get_events(query.replace("SID", sid), headers))
    reply = raw.response()
    return reply.code, reply.json(), reply.header("cache-control"), \
        reply.header("access-control-allow-origin")


@pytest.mark.parametrize("query,argv,headers", [
    ("session=nope", (), None),
    ("", (), None),
    ("session=SID&last_event_id=x", (), None),
    ("session=SID", (), {"Last-Event-ID": "-1"}),
    ("session=SID", ("--api-key", "k1"), None),
    ("session=SID&apikey=wrong", ("--api-key", "k1"), None),
    ("session=SID", ("--cors-origin", "https://app.example"),
     {"Origin": "https://evil.example"}),
])
def test_refusals_are_the_same_json_on_both_fronts(query, argv, headers) -> None:
    fast = refusal("fast", query, *argv, headers=headers)
    assert fast == refusal("twisted", query, *argv, headers=headers)
    assert fast[0] in (400, 403, 404) and set(fast[1]["error"]) == {"code", "message"}
    assert fast[2] == "no-store"


def test_an_unknown_session_is_404_and_the_connection_goes_on() -> None:
    node = ClockNode()
    raw = Raw(node.http_factory())
    raw.send(get_events("session=nope") + http_request("GET", "/health"))
    replies = raw.responses()
    assert replies[0].code == 404
    assert replies[0].json() == {"error": {"code": 1001, "message": "unknown session"}}
    assert replies[1].code == 200 and not raw.closing


def test_a_key_in_the_query_opens_the_stream() -> None:
    node = ClockNode("--api-key", "k1")
    sid = session(node)
    raw = open_stream(node, f"session={sid}&apikey=k1")
    assert raw.transport.value().startswith(b"HTTP/1.1 200 OK\r\n")


def test_a_disconnect_detaches_and_the_timeout_counts_from_then() -> None:
    node = ClockNode("--session-timeout", "30")
    sid = session(node)
    raw = open_stream(node, f"session={sid}")
    node.clock.advance(100)                         # attached: does not expire
    assert alive(node, sid)
    stream = raw.protocol.stream
    raw.protocol.connectionLost(Failure(ConnectionDone()))
    assert node.engine.sessions.get(sid).delivery is None
    assert stream not in stream.hub.heartbeat.streams
    node.clock.advance(29)
    assert alive(node, sid)
    node.clock.advance(2)
    assert not alive(node, sid)


def test_a_slow_consumer_is_not_written_to_until_it_drains() -> None:
    node = ClockNode()
    sid = session(node)
    raw = open_stream(node, f"session={sid}")
    assert raw.transport.producer is raw.protocol.stream      # the socket's producer
    raw.transport.producer.pauseProducing()    # unsent bytes passed the bound
    before = raw.transport.value()
    publish(node, 1, 2)
    node.clock.advance(30)                     # nor pings
    assert raw.transport.value() == before
    raw.transport.producer.resumeProducing()
    _, chunks = split(raw.transport.value())
    assert [e["seq"] for e in events_in(chunks)] == [1, 2]


def test_a_new_stream_replaces_the_attached_one_which_ends() -> None:
    node = ClockNode()
    sid = session(node)
    old = open_stream(node, f"session={sid}")
    new = open_stream(node, f"session={sid}")
    assert old.transport.value().endswith(b"0\r\n\r\n") and old.closing
    assert old.transport.producer is None
    assert node.engine.sessions.get(sid).delivery is new.protocol.stream
    publish(node, 1)
    assert events_in(split(new.transport.value())[1])[0]["seq"] == 1
    assert b"data:" not in old.transport.value()


def test_the_stream_becomes_the_sockets_protocol_after_a_twisted_web_request() -> None:
    node = ClockNode("--max-client-connections", "0")
    sid = session(node)
    raw = Raw(node.http_factory())
    raw.transport.protocol = raw.protocol       # as a TCP connection has it
    raw.send(http_request("GET", "/health"))
    assert raw.protocol.behind is not None      # twisted.web answered it
    health = raw.transport.value()
    raw.send(get_events(f"session={sid}"))
    stream = raw.transport.protocol
    assert isinstance(stream, SseStream) and raw.transport.producer is stream
    assert raw.protocol.behind is None
    data = raw.transport.value()[len(health):]
    assert data.startswith(b"HTTP/1.1 200 OK\r\n")
    publish(node, 1)
    assert events_in(split(raw.transport.value()[len(health):])[1])[0]["seq"] == 1
    stream.connectionLost(Failure(ConnectionDone()))         # the socket tells the stream
    assert node.engine.sessions.get(sid).delivery is None


def test_a_counted_connection_is_released_when_the_stream_ends() -> None:
    node = ClockNode("--max-client-connections", "1")
    sid = session(node)
    raw = Raw(node.http_factory())
    raw.transport.protocol = raw.protocol
    raw.send(get_events(f"session={sid}"))
    socket_protocol = raw.transport.protocol
    assert socket_protocol is not raw.protocol          # the channel is freed
    assert node.policy.connections.open == {"127.0.0.1": 1}
    socket_protocol.connectionLost(Failure(ConnectionDone()))
    assert node.policy.connections.open == {}
    assert node.engine.sessions.get(sid).delivery is None


def test_http_1_0_gets_the_stream_unframed() -> None:
    node = ClockNode()
    sid = session(node)
    raw = open_stream(node, f"session={sid}", version="1.0")
    head, _, body = raw.transport.value().partition(b"\r\n\r\n")
    assert b"Transfer-Encoding" not in head and body == b": open\n\n"
    publish(node, 1)
    assert b"retry: 3000\nid: 1\ndata: {" in raw.transport.value()
