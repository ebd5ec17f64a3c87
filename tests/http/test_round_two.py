"""Deadlines, caps and strict numbers on both fronts (SPEC section 18), and
what every answer carries (SPEC section 17): the same bytes into ``--http
fast`` and ``--http twisted`` on the node's Clock (``Raw``)."""
from __future__ import annotations

import json
from email.utils import parsedate_to_datetime

import pytest
from twisted.internet.error import ConnectionDone
from twisted.python.failure import Failure

from tests.http.harness import ClockNode, Raw, http_request

FRONTS = ["fast", "twisted"]
HEALTH = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"


def rpc_bytes(method: str, *params, id_: int = 1) -> bytes:
    body = json.dumps({"jsonrpc": "2.0", "id": id_, "method": method,
                       "params": list(params)}).encode()
    return http_request("POST", "/api/jsonrpc", body, {"Content-Type": "application/json"})


def front(name: str, *argv: str):
    node = ClockNode("--http", name, *argv)
    return node, node.http_factory()


def close(raw: Raw) -> None:
    raw.protocol.connectionLost(Failure(ConnectionDone()))


# -- --body-timeout -------------------------------------------------------------------

@pytest.mark.parametrize("name", FRONTS)
def test_a_body_that_stops_after_its_headers_is_cut_at_the_body_timeout(name: str) -> None:
    node, factory = front(name, "--body-timeout", "5")
    raw = Raw(factory)
    raw.send(http_request("POST", "/api/jsonrpc", b'{"js', {"Content-Type": "application/json"},
                          length=100))
    node.clock.advance(4.9)
    assert not raw.closing
    node.clock.advance(0.2)
    assert raw.closing
    (reply,) = raw.responses()
    assert reply.code == 408 and reply.header("connection") == "close"
    assert reply.json()["error"]


@pytest.mark.parametrize("name", FRONTS)
def test_a_trickled_body_is_cut_however_busy_the_client_is(name: str) -> None:
    node, factory = front(name, "--body-timeout", "5", "--header-timeout", "2")
    raw = Raw(factory)
    raw.send(http_request("POST", "/api/publish", b"", {"Content-Type": "application/json"},
                          length=100))
    sent = 0
    while not raw.closing and sent < 100:
        raw.send(b" ")                          # a byte a second: never idle
        sent += 1
        node.clock.advance(1)
    assert raw.closing and sent == 5
    assert raw.responses()[-1].code == 408


@pytest.mark.parametrize("name", FRONTS)
def test_a_body_in_time_is_served_and_its_deadline_is_gone(name: str) -> None:
    node, factory = front(name, "--body-timeout", "5")
    raw = Raw(factory)
    data = rpc_bytes("stats.online")
    raw.send(data[:-10])
    node.clock.advance(4)
    raw.send(data[-10:])
    node.clock.advance(10)
    assert not raw.closing
    assert [r.code for r in raw.responses()] == [200]


# -- --max-client-connections ------------------------------------------------------------

@pytest.mark.parametrize("name", FRONTS)
def test_connections_past_a_clients_cap_are_refused_while_others_are_served(name: str) -> None:
    node, factory = front(name, "--max-client-connections", "3")
    held = [Raw(factory, host="203.0.113.5") for _ in range(3)]
    assert not any(h.closing for h in held)
    extra = Raw(factory, host="203.0.113.5")
    assert extra.closing
    (reply,) = extra.responses()
    assert reply.code == 429 and reply.json()["error"]
    close(extra)                                # a refused connection counts for nothing
    other = Raw(factory, host="198.51.100.7")
    other.send(HEALTH)
    node.clock.advance(0)
    assert [r.code for r in other.responses()] == [200]
    close(held[0])
    again = Raw(factory, host="203.0.113.5")
    assert not again.closing
    again.send(HEALTH)
    node.clock.advance(0)
    assert [r.code for r in again.responses()] == [200]


@pytest.mark.parametrize("name", FRONTS)
def test_a_trusted_proxys_connections_count_under_the_client_they_carry(name: str) -> None:
    node, factory = front(name, "--max-client-connections", "2",
                          "--trusted-proxies", "127.0.0.1/32")
    request = HEALTH[:-2] + b"X-Forwarded-For: 203.0.113.9\r\n\r\n"
    raws = [Raw(factory) for _ in range(3)]
    for raw in raws:
        raw.send(request)
    node.clock.advance(0)
    assert [r.responses()[0].code for r in raws] == [200, 200, 429]
    assert raws[2].closing
    other = Raw(factory)
    other.send(HEALTH[:-2] + b"X-Forwarded-For: 203.0.113.10\r\n\r\n")
    node.clock.advance(0)
    assert other.responses()[0].code == 200


def test_max_client_connections_has_a_default_and_zero_is_no_limit() -> None:
    assert ClockNode().options["max-client-connections"] == 256
    node, factory = front("fast", "--max-client-connections", "0")
    raws = [Raw(factory) for _ in range(300)]
    assert not any(r.closing for r in raws)


# -- a non-WebSocket Upgrade -------------------------------------------------------------

@pytest.mark.parametrize("name", FRONTS)
@pytest.mark.parametrize("upgrade", [b"h2c", b"foo/1", b"TLS/1.0, HTTP/1.1"])
def test_a_non_websocket_upgrade_is_an_ordinary_request_under_the_deadlines(
        name: str, upgrade: bytes) -> None:
    node, factory = front(name, "--header-timeout", "2")
    raw = Raw(factory)
    raw.send(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: "
             + upgrade + b"\r\n\r\n")
    node.clock.advance(0)
    assert [r.code for r in raw.responses()] == [200]
    raw.send(b"GET /health HTTP/1.1\r\nX-Slow: 1\r\n")     # then headers that trickle
    node.clock.advance(1.9)
    assert not raw.closing
    node.clock.advance(0.2)
    assert raw.closing
    assert [r.code for r in raw.responses()] == [200, 408]


@pytest.mark.parametrize("name", FRONTS)
def test_requests_after_a_non_websocket_upgrade_are_read_as_requests(name: str) -> None:
    node, factory = front(name)
    raw = Raw(factory)
    raw.send(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: upgrade\r\nUpgrade: h2c\r\n\r\n"
             + rpc_bytes("stats.online", id_=7))
    node.clock.advance(0)
    replies = raw.responses()
    assert [r.code for r in replies] == [200, 200] and replies[1].json()["id"] == 7


# -- numbers in headers ---------------------------------------------------------------------

def _bytes(value: str) -> bytes:
    try:
        return value.encode("latin-1")         # "²" as the one byte 0xB2
    except UnicodeEncodeError:
        return value.encode("utf-8")


LAST_IDS = ["²", "¹", "١٢", "+1", "1_0", "1 1", "9" * 40, "1" * 5000, "0x10"]


@pytest.mark.parametrize("name", FRONTS)
@pytest.mark.parametrize("value", LAST_IDS)
def test_a_last_event_id_that_is_no_ascii_number_is_a_json_400(name: str, value: str) -> None:
    node, factory = front(name)
    raw = Raw(factory)
    raw.send(b"GET /api/events?session=abc HTTP/1.1\r\nHost: x\r\nLast-Event-ID: "
             + _bytes(value) + b"\r\n\r\n")
    node.clock.advance(0)
    (reply,) = raw.responses()
    assert reply.code == 400 and reply.json()["error"]["code"] == -32602


@pytest.mark.parametrize("name", FRONTS)
@pytest.mark.parametrize("value", ["%B2", "%C2%B2", "%D9%A1", "%2B1", "1" * 5000])
def test_a_last_event_id_in_the_query_that_is_no_ascii_number_is_a_json_400(
        name: str, value: str) -> None:
    node, factory = front(name)
    raw = Raw(factory)
    raw.send(b"GET /api/events?session=abc&last_event_id=" + value.encode()
             + b" HTTP/1.1\r\nHost: x\r\n\r\n")
    node.clock.advance(0)
    (reply,) = raw.responses()
    assert reply.code == 400 and reply.json()["error"]["code"] == -32602


@pytest.mark.parametrize("name", FRONTS)
@pytest.mark.parametrize("value", ["²", "１２", "+12", "1" * 5000, "0" * 4000 + "12", "-1"])
def test_a_content_length_that_is_no_ascii_number_is_a_json_400(name: str, value: str) -> None:
    node, factory = front(name)
    raw = Raw(factory)
    raw.send(b"POST /api/jsonrpc HTTP/1.1\r\nHost: x\r\nContent-Length: "
             + value.encode() + b"\r\n\r\n{}")
    node.clock.advance(0)
    (reply,) = raw.responses()
    assert reply.code == 400 and raw.closing


# -- pipelining behind a parked poll -------------------------------------------------------

@pytest.mark.parametrize("name", FRONTS)
def test_pipelined_requests_behind_a_parked_poll_are_not_read(name: str) -> None:
    node, factory = front(name, "--client-rate", "0")
    raw = Raw(factory)
    raw.send(rpc_bytes("session.create"))
    node.clock.advance(0)
    sid = raw.responses()[0].json()["result"]
    big = http_request("POST", "/api/jsonrpc", b" " * 200_000,
                       {"Content-Type": "application/json"})
    raw.send(rpc_bytes("session.get_events", sid, 30, id_=2) + rpc_bytes("stats.online", id_=3))
    raw.send(big[:65536])
    node.clock.advance(0)
    assert raw.transport.producerState == "paused"
    assert len(raw.responses()) == 1
    node.clock.advance(31)                      # the poll is answered: reading goes on
    assert raw.transport.producerState == "producing"
    assert [r.json().get("id") for r in raw.responses()] == [1, 2, 3]


# -- Date --------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", FRONTS)
def test_every_answer_carries_a_date(name: str) -> None:
    node, factory = front(name, "--max-body", "1000")
    raw = Raw(factory)
    raw.send(rpc_bytes("stats.online") + rpc_bytes("no.such", id_=2) + HEALTH
             + b"GET /no/such HTTP/1.1\r\nHost: x\r\n\r\n"
             + http_request("POST", "/api/jsonrpc", b"", {}, length=5000))
    node.clock.advance(0)
    replies = raw.responses()
    assert [r.code for r in replies] == [200, 200, 200, 404, 413]
    for reply in replies:
        assert parsedate_to_datetime(reply.header("date")).tzinfo is not None, reply


@pytest.mark.parametrize("name", FRONTS)
@pytest.mark.parametrize("header", [b"Connection: \x80", b"Upgrade: \xffwebsocket",
                                    b"Sec-WebSocket-Key: \xb2"])
def test_a_websocket_handshake_header_that_is_not_ascii_is_a_json_400(
        name: str, header: bytes) -> None:
    node, factory = front(name)
    raw = Raw(factory)
    raw.send(b"GET /api/ws HTTP/1.1\r\nHost: x\r\n" + header + b"\r\n\r\n")
    node.clock.advance(0)
    (reply,) = raw.responses()
    assert reply.code in (400, 426) and reply.json()["error"]


# -- lingering close after an early refusal --------------------------------------------------

@pytest.mark.parametrize("name", FRONTS)
def test_a_refused_body_is_read_and_dropped_for_a_moment_before_the_close(name: str) -> None:
    from pushengine.web.policy import LINGER_SECONDS
    node, factory = front(name, "--max-body", "1000")
    raw = Raw(factory)
    raw.send(http_request("POST", "/api/jsonrpc", b"x" * 500, {}, length=10_000_000))
    node.clock.advance(0)
    (reply,) = raw.responses()
    assert reply.code == 413 and reply.json()["error"]["code"] == -32600
    # the body still arriving is read and dropped: no reset under the client's answer
    assert not raw.closing
    raw.send(b"x" * 100_000)
    node.clock.advance(LINGER_SECONDS - 0.1)
    assert not raw.closing
    node.clock.advance(0.2)                     # then the connection closes
    assert raw.closing
    assert len(raw.responses()) == 1


@pytest.mark.parametrize("name", FRONTS)
def test_a_lingering_close_ends_after_a_bounded_number_of_bytes(name: str) -> None:
    from pushengine.web.policy import LINGER_BYTES
    node, factory = front(name, "--max-body", "1000")
    raw = Raw(factory)
    raw.send(http_request("POST", "/api/jsonrpc", b"", {}, length=100_000_000))
    node.clock.advance(0)
    sent = 0
    while not raw.closing and sent < 4 * LINGER_BYTES:
        raw.send(b"x" * 65536)
        sent += 65536
    assert raw.closing and sent <= LINGER_BYTES + 2 * 65536 + 1000
    assert [r.code for r in raw.responses()] == [413]


# -- chunk sizes and extensions -----------------------------------------------------------------

CHUNKED = (b"POST /api/jsonrpc HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
           b"Transfer-Encoding: chunked\r\n\r\n")


@pytest.mark.parametrize("name", FRONTS)
@pytest.mark.parametrize("line", [b"0" * 100_000 + b"2", b"2;" + b"a" * 100_000,
                                  b"2;x=" + b"b" * 200_000, b"1" * 70_000])
def test_a_chunk_size_line_without_bound_is_a_json_400(name: str, line: bytes) -> None:
    node, factory = front(name)
    raw = Raw(factory)
    data = CHUNKED + line + b"\r\n{}\r\n0\r\n\r\n"
    for i in range(0, len(data), 65536):
        if raw.closing:
            break
        raw.send(data[i:i + 65536])
    node.clock.advance(0)
    (reply,) = raw.responses()
    assert reply.code == 400 and raw.closing
    reply.json()


@pytest.mark.parametrize("name", FRONTS)
def test_many_small_chunks_with_short_extensions_are_served(name: str) -> None:
    node, factory = front(name)
    raw = Raw(factory)
    body = b'{"jsonrpc":"2.0","id":4,"method":"stats.online"}' + b" " * 2000
    data = CHUNKED + b"".join(b"1;n=%d\r\n%s\r\n" % (i, body[i:i + 1])
                              for i in range(len(body))) + b"0\r\n\r\n"
    for i in range(0, len(data), 1000):
        raw.send(data[i:i + 1000])
    node.clock.advance(0)
    assert [(r.code, r.json()["id"]) for r in raw.responses()] == [(200, 4)]


@pytest.mark.parametrize("name", FRONTS)
def test_an_upload_refused_before_its_body_lingers_then_closes(name: str) -> None:
    from pushengine.web.policy import LINGER_SECONDS
    node, factory = front(name, "--api-key", "k" * 20)
    raw = Raw(factory, host="203.0.113.7")
    raw.send(b"POST /api/segments/fans HTTP/1.1\r\nHost: x\r\nContent-Type: text/csv\r\n"
             b"Content-Length: 100000000\r\n\r\n" + b"a@example.com\n" * 100)
    node.clock.advance(0)
    (reply,) = raw.responses()
    assert reply.code in (401, 403) and reply.json()["error"]
    assert not raw.closing
    raw.send(b"b@example.com\n" * 5000)
    node.clock.advance(LINGER_SECONDS + 0.1)
    assert raw.closing
    assert len(raw.responses()) == 1


def test_the_fast_fronts_date_is_made_again_every_second_while_it_listens() -> None:
    node, factory = front("fast")

    def ticks() -> int:
        return sum(call.func == factory._tick for call in node.clock.getDelayedCalls())
    assert ticks() == 0
    factory.doStart()
    assert ticks() == 1
    tail = factory.ok_tail
    node.clock.advance(1.01)
    assert b"Date: " in factory.ok_tail and ticks() == 1
    assert factory.ok_tail.startswith(tail.partition(b"Date: ")[0])
    factory.doStop()
    assert ticks() == 0
