"""HEAD on the stream routes (``/api/events``, ``/api/ws``), on both fronts.

A HEAD is the GET's head without its body (RFC 9110 section 9.3.2), and it
is safe: it never attaches a delivery, never replaces the session's
attached stream, never holds the connection, and never upgrades. The
answer ends at its blank line: the next request on the connection is
answered.
"""
from __future__ import annotations

import json

import h11
import pytest

from tests.http.harness import ClockNode, Raw, http_request
from tests.transports.test_sse_raw import alive, get_events, open_stream, session

FRONTS = ["fast", "twisted"]
UPGRADE = {"Upgrade": "websocket", "Connection": "Upgrade",
           "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==", "Sec-WebSocket-Version": "13"}


def head_then_health(node: ClockNode, path: str, headers: dict | None = None
                     ) -> tuple[h11.Response, h11.Response, Raw]:
    """HEAD ``path``, then GET /health on the same connection: both answers,
    as a strict client reads them (the HEAD's must end at its blank line)."""
    raw = Raw(node.http_factory())
    lines = [f"HEAD {path} HTTP/1.1", "Host: 127.0.0.1"]
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    raw.send(("\r\n".join(lines) + "\r\n\r\n").encode())
    node.clock.advance(0)
    raw.send(http_request("GET", "/health"))
    node.clock.advance(0)
    client = h11.Connection(h11.CLIENT)
    client.send(h11.Request(method="HEAD", target=path, headers=[("Host", "x")]))
    client.send(h11.EndOfMessage())
    client.receive_data(raw.transport.value())
    heads: list[h11.Response] = []
    body = b""
    while len(heads) < 2:
        event = client.next_event()
        assert event not in (h11.NEED_DATA, h11.PAUSED), (raw.transport.value(), heads)
        if isinstance(event, h11.Response):
            heads.append(event)
        elif isinstance(event, h11.Data):
            body += event.data
        elif isinstance(event, h11.EndOfMessage) and len(heads) == 1:
            assert body == b"", body                # nothing after a HEAD's head
            client.start_next_cycle()
            client.send(h11.Request(method="GET", target="/health", headers=[("Host", "x")]))
            client.send(h11.EndOfMessage())
    return heads[0], heads[1], raw


def headers_of(answer: h11.Response) -> dict[bytes, bytes]:
    return {name.lower(): value for name, value in answer.headers}


@pytest.mark.parametrize("front", FRONTS)
def test_a_head_answers_the_streams_head_and_ends(front: str) -> None:
    node = ClockNode("--http", front, "--cors-origin", "https://app.example")
    sid = session(node)
    head, health, raw = head_then_health(node, f"/api/events?session={sid}")
    assert head.status_code == 200
    h = headers_of(head)
    assert h[b"content-type"] == b"text/event-stream"
    assert h[b"cache-control"] == b"no-store"
    assert h[b"access-control-allow-origin"] == b"https://app.example"
    assert b"date" in h
    assert health.status_code == 200 and not raw.closing


@pytest.mark.parametrize("front", FRONTS)
def test_a_head_does_not_attach_nor_hold_the_session(front: str) -> None:
    node = ClockNode("--http", front, "--session-timeout", "30")
    sid = session(node)
    head, _, _ = head_then_health(node, f"/api/events?session={sid}")
    assert head.status_code == 200
    assert node.engine.sessions.get(sid).delivery is None
    node.clock.advance(31)                          # not attached: the session expires
    assert not alive(node, sid)


@pytest.mark.parametrize("front", FRONTS)
def test_a_head_does_not_replace_the_attached_stream(front: str) -> None:
    node = ClockNode("--http", front)
    sid = session(node)
    stream = open_stream(node, f"session={sid}")
    delivery = node.engine.sessions.get(sid).delivery
    assert delivery is not None
    before = stream.transport.value()
    head, _, _ = head_then_health(node, f"/api/events?session={sid}")
    assert head.status_code == 200
    assert node.engine.sessions.get(sid).delivery is delivery
    assert not stream.closing and stream.transport.value() == before


@pytest.mark.parametrize("front", FRONTS)
@pytest.mark.parametrize("query,argv,status", [
    ("session=nope", (), 404),
    ("", (), 400),
    ("session=SID&last_event_id=x", (), 400),
    ("session=SID&last_event_id=99", (), 400),     # ahead of the session
    ("session=SID", ("--api-key", "k1"), 403),
])
def test_a_head_is_refused_as_the_get_and_ends(front: str, query: str, argv: tuple,
                                                status: int) -> None:
    node = ClockNode("--http", front, *argv)
    sid = session(node)
    query = query.replace("SID", sid)
    head, health, raw = head_then_health(node, f"/api/events?{query}")
    # the GET's answer, for its status and its length
    get = Raw(node.http_factory())
    get.send(get_events(query))
    reply = get.response()
    assert head.status_code == reply.code == status
    h = headers_of(head)
    assert h[b"content-type"].startswith(b"application/json")
    assert h[b"cache-control"] == b"no-store"
    assert int(h[b"content-length"]) == len(reply.body)
    assert set(json.loads(reply.body)["error"]) == {"code", "message"}
    assert health.status_code == 200 and not raw.closing
    assert node.engine.sessions.get(sid).delivery is None


@pytest.mark.parametrize("front", FRONTS)
@pytest.mark.parametrize("headers", [UPGRADE, None])
def test_a_head_on_the_websocket_route_never_upgrades(front: str, headers: dict | None) -> None:
    node = ClockNode("--http", front)
    head, health, raw = head_then_health(node, "/api/ws", headers)
    assert head.status_code == 426
    h = headers_of(head)
    assert h[b"upgrade"] == b"websocket"
    assert h[b"content-type"].startswith(b"application/json")
    get = Raw(node.http_factory())
    get.send(http_request("GET", "/api/ws"))
    reply = get.response()
    assert reply.code == 426 and int(h[b"content-length"]) == len(reply.body)
    assert health.status_code == 200 and not raw.closing


def test_both_fronts_answer_a_head_with_the_same_head() -> None:
    def answer(front: str, path: str, headers: dict | None = None) -> tuple:
        node = ClockNode("--http", front)
        sid = session(node)
        head, _, _ = head_then_health(node, path.replace("SID", sid), headers)
        h = headers_of(head)
        return head.status_code, {k: v for k, v in h.items()
                                  if k not in (b"date", b"server")}
    for path, headers in [("/api/events?session=SID", None), ("/api/events?session=x", None),
                          ("/api/ws", UPGRADE)]:
        assert answer("fast", path, headers) == answer("twisted", path, headers), path


@pytest.mark.parametrize("front", FRONTS)
def test_a_head_never_resumes_a_session_from_the_cluster(front: str) -> None:
    node = ClockNode("--http", front)
    asked: list = []

    def resume(sid: str, seq: int | None) -> None:
        asked.append(sid)
        raise AssertionError("a HEAD resumed a session")
    node.api.resume = resume                    # as with --redis: another node may hold it
    head, health, _ = head_then_health(node, "/api/events?session=elsewhere")
    # what a GET would find out only by resuming it: the stream's head
    assert head.status_code == 200 and asked == []
    assert health.status_code == 200
