"""Framing on both fronts (SPEC section 22): an ``Upgrade`` that is not the
WebSocket handshake of ``/api/ws`` is an ordinary request whose body is read
once, CONNECT is 405 with the connection closed, and an absolute-form
request target (RFC 9112 section 3.2.2) is served as its origin form. The
same bytes into ``--http fast`` and ``--http twisted`` on the node's Clock."""
from __future__ import annotations

import json

import h11
import pytest

from tests.http.harness import ClockNode, Raw, http_request

FRONTS = ["fast", "twisted"]


def front(name: str, *argv: str):
    node = ClockNode("--http", name, *argv)
    return node, node.http_factory()


def call_body(method: str, id_: int, *params) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": id_, "method": method,
                       "params": list(params)}).encode()


def upgrade_post(body: bytes, upgrade: bytes = b"h2c", chunked: bool = False) -> bytes:
    head = (b"POST /api/jsonrpc HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: Upgrade\r\n"
            b"Upgrade: " + upgrade + b"\r\nContent-Type: application/json\r\n")
    if chunked:
        return head + (b"Transfer-Encoding: chunked\r\n\r\n%x\r\n" % len(body) + body
                       + b"\r\n0\r\n\r\n")
    return head + b"Content-Length: %d\r\n\r\n" % len(body) + body


def ids(raw: Raw) -> list:
    return [(r.code, r.json().get("id") if r.code == 200 else None) for r in raw.responses()]


# -- an Upgrade that is no WebSocket handshake: its body read once -------------------------

@pytest.mark.parametrize("name", FRONTS)
@pytest.mark.parametrize("upgrade", [b"h2c", b"websocket", b"foo/1, TLS/1.0"])
@pytest.mark.parametrize("chunked", [False, True])
def test_an_upgrades_body_is_its_body_and_the_next_request_follows(
        name: str, upgrade: bytes, chunked: bool) -> None:
    """Before, the fast front answered the call with an empty body (-32700)
    and then parsed the body as the next request (400, closed)."""
    node, factory = front(name)
    raw = Raw(factory)
    raw.send(upgrade_post(call_body("stats.online", 1), upgrade, chunked)
             + http_request("POST", "/api/jsonrpc", call_body("stats.online", 2),
                            {"Content-Type": "application/json"}))
    node.clock.advance(0)
    assert ids(raw) == [(200, 1), (200, 2)]
    assert not raw.closing


@pytest.mark.parametrize("name", FRONTS)
def test_an_upgrades_body_may_come_in_later_reads(name: str) -> None:
    node, factory = front(name)
    raw = Raw(factory)
    data = upgrade_post(call_body("stats.online", 3))
    head_end = data.index(b"\r\n\r\n") + 4
    raw.send(data[:head_end])
    node.clock.advance(0)
    assert raw.responses() == []
    raw.send(data[head_end:head_end + 5])
    node.clock.advance(1)
    raw.send(data[head_end + 5:])
    node.clock.advance(0)
    assert ids(raw) == [(200, 3)]


@pytest.mark.parametrize("name", FRONTS)
def test_an_upgrades_body_is_under_the_body_limit_and_deadline(name: str) -> None:
    node, factory = front(name, "--max-body", "1000", "--body-timeout", "5")
    raw = Raw(factory)
    raw.send(upgrade_post(b"x" * 2000))
    node.clock.advance(0)
    assert [r.code for r in raw.responses()] == [413]
    raw = Raw(factory)
    raw.send(upgrade_post(call_body("stats.online", 4))[:-10])
    node.clock.advance(5.1)
    assert [r.code for r in raw.responses()] == [408] and raw.closing


@pytest.mark.parametrize("name", FRONTS)
def test_a_websocket_upgrade_of_another_path_stays_under_the_deadlines(name: str) -> None:
    """Before, the fast front handed such a connection to twisted.web for
    good, where no header deadline ran: headers trickled after it were
    never cut."""
    node, factory = front(name, "--header-timeout", "2")
    raw = Raw(factory)
    raw.send(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
             b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
    node.clock.advance(0)
    assert [r.code for r in raw.responses()] == [200]
    raw.send(b"GET /health HTTP/1.1\r\nX-Slow: 1\r\n")
    node.clock.advance(1.9)
    assert not raw.closing
    node.clock.advance(0.2)
    assert raw.closing and [r.code for r in raw.responses()] == [200, 408]


# -- CONNECT ---------------------------------------------------------------------------------

@pytest.mark.parametrize("name", FRONTS)
@pytest.mark.parametrize("target", [b"example.com:443", b"127.0.0.1:8080", b"/api/jsonrpc"])
def test_connect_is_405_and_closes_without_reading_its_body(name: str, target: bytes) -> None:
    """Before: 404, then its body was read as the next request (fast: a 400;
    twisted.web: the pipelined /health answered)."""
    node, factory = front(name)
    raw = Raw(factory)
    raw.send(b"CONNECT " + target + b" HTTP/1.1\r\nHost: x\r\nContent-Length: 26\r\n\r\n"
             + b"GET /health HTTP/1.1\r\n\r\n" + b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
    node.clock.advance(0)
    (reply,) = raw.responses()
    assert reply.code == 405 and reply.header("connection") == "close"
    assert reply.header("allow") == "" and "CONNECT" in reply.json()["error"]
    assert raw.closing


# -- the absolute form -----------------------------------------------------------------------

@pytest.mark.parametrize("name", FRONTS)
def test_an_absolute_form_target_is_served_as_its_origin_form(name: str) -> None:
    """Before: 404 on both fronts."""
    node, factory = front(name)
    raw = Raw(factory)
    raw.send(b"GET http://127.0.0.1:8080/health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
             + b"GET HTTP://EXAMPLE.ORG/health/live?x=1 HTTP/1.1\r\nHost: other\r\n\r\n"
             + http_request("POST", "https://127.0.0.1/api/jsonrpc",
                            call_body("stats.online", 9), {"Content-Type": "application/json"}))
    node.clock.advance(0)
    replies = raw.responses()
    assert [r.code for r in replies] == [200, 200, 200]
    assert replies[0].json()["status"] == "ok" and replies[2].json()["id"] == 9
    assert not raw.closing


@pytest.mark.parametrize("name", FRONTS)
def test_an_absolute_forms_authority_is_the_host(name: str) -> None:
    """The authority replaces the Host header (RFC 9112 section 3.2.2): a
    good Host does not pass a bad authority, and a redirect stays relative."""
    node, factory = front(name)
    raw = Raw(factory)
    raw.send(b"GET http://a..b/health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    node.clock.advance(0)
    (reply,) = raw.responses()
    assert reply.code == 400 and "Host" in reply.json()["error"]
    raw = Raw(factory)
    raw.send(b"GET http://evil.example/examples HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    node.clock.advance(0)
    (reply,) = raw.responses()
    assert reply.code in (301, 302, 308) and reply.header("location").startswith("/")


@pytest.mark.parametrize("name", FRONTS)
@pytest.mark.parametrize("target", [b"http://", b"http:///health", b"http://user@h/health",
                                    b"http://h/health#x"])
def test_an_absolute_form_without_a_host_is_a_json_400(name: str, target: bytes) -> None:
    node, factory = front(name)
    raw = Raw(factory)
    raw.send(b"GET " + target + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    node.clock.advance(0)
    (reply,) = raw.responses()
    assert reply.code == 400 and reply.json()["error"]


@pytest.mark.parametrize("name", FRONTS)
def test_the_answers_are_http_a_strict_client_reads(name: str) -> None:
    """h11 reads the 405 of CONNECT and the answers to the absolute form."""
    node, factory = front(name)
    for request, status in (
            (h11.Request(method="CONNECT", target="example.com:443",
                         headers=[("Host", "example.com:443")]), 405),
            (h11.Request(method="GET", target="http://127.0.0.1/health",
                         headers=[("Host", "127.0.0.1")]), 200)):
        client = h11.Connection(h11.CLIENT)
        raw = Raw(factory)
        raw.send(client.send(request) + client.send(h11.EndOfMessage()))
        node.clock.advance(0)
        client.receive_data(raw.transport.value())
        event = client.next_event()
        assert isinstance(event, h11.Response) and event.status_code == status
