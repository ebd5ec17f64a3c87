"""Connection deadlines (SPEC section 12): a request's headers must arrive within
``--header-timeout`` however they trickle in; an idle connection is closed after
``--idle-timeout``; a parked long-poll is cut by neither.

Everything runs on the node's Clock through its real Site (``Raw``), so the
deadlines are checked to the simulated second."""
from __future__ import annotations

import json
from typing import Any

import pytest
from twisted.internet.address import IPv4Address
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.web.resource import Resource
from twisted.web.server import NOT_DONE_YET, Site

from pushengine.web.channel import DeadlineChannel, deadline_protocol
from tests.http.harness import ClockNode, Raw, Reply, http_request

HEALTH = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"


def responses(raw: Raw) -> list[Reply]:
    return raw.responses()


def rpc_request(method: str, *params: Any) -> bytes:
    body = json.dumps({"jsonrpc": "2.0", "method": method, "params": list(params),
                       "id": 1}).encode()
    return http_request("POST", "/api/jsonrpc", body, {"Content-Type": "application/json"})


def connect(node: ClockNode) -> Raw:
    return Raw(node.site())


# -- the header deadline ------------------------------------------------------------

def test_headers_trickled_byte_by_byte_past_the_deadline_are_cut() -> None:
    node = ClockNode("--header-timeout", "2")
    raw = connect(node)
    request = HEALTH[:-2] + b"".join(b"X-Pad-%d: x\r\n" % i for i in range(100)) + b"\r\n"
    sent = 0
    while not raw.closing and sent < len(request):
        raw.send(request[sent:sent + 1])       # a byte every 0.1 s: never idle
        sent += 1
        node.clock.advance(0.1)
    assert raw.closing
    assert sent == 20                          # cut at 2 s, however busy the client was
    (reply,) = responses(raw)
    assert reply.code == 408 and reply.header("connection") == "close"
    assert reply.content_type == "application/json" and reply.json()["error"]


def test_a_slowloris_line_every_few_seconds_is_cut() -> None:
    node = ClockNode("--header-timeout", "10")
    raw = connect(node)
    raw.send(b"GET /health HTTP/1.1\r\n")
    for i in range(3):
        node.clock.advance(3)
        raw.send(b"X-Slow-%d: 1\r\n" % i)
        assert not raw.closing
    node.clock.advance(1.01)                   # 10 s after the connection was made
    assert raw.closing
    assert responses(raw)[0].code == 408


def test_a_connection_that_sends_nothing_is_cut_at_the_header_deadline() -> None:
    node = ClockNode("--header-timeout", "3")
    raw = connect(node)
    node.clock.advance(2.9)
    assert not raw.closing
    node.clock.advance(0.2)
    assert raw.closing


def test_headers_complete_in_time_are_served() -> None:
    node = ClockNode("--header-timeout", "2")
    raw = connect(node)
    for piece in (HEALTH[:10], HEALTH[10:25], HEALTH[25:]):
        node.clock.advance(0.6)                 # 1.8 s in all
        raw.send(piece)
    (reply,) = responses(raw)
    assert reply.code == 200 and reply.json()["status"] == "ok"
    node.clock.advance(5)                       # the deadline was cancelled
    assert not raw.closing


def test_a_keep_alive_request_gets_a_fresh_header_deadline() -> None:
    node = ClockNode("--header-timeout", "2", "--idle-timeout", "30")
    raw = connect(node)
    node.clock.advance(1.5)
    raw.send(HEALTH)
    node.clock.advance(10)                      # idle between requests: not a header wait
    raw.send(HEALTH[:20])
    node.clock.advance(1.9)                     # 1.9 s since the second request began
    raw.send(HEALTH[20:])
    assert [r.code for r in responses(raw)] == [200, 200]
    assert not raw.closing
    # the third request trickles: cut 2 s after its first byte
    raw.send(HEALTH[:5])
    node.clock.advance(1.0)
    raw.send(HEALTH[5:10])
    node.clock.advance(1.01)
    assert raw.closing
    assert [r.code for r in responses(raw)] == [200, 200, 408]


def test_pipelined_requests_are_all_served() -> None:
    node = ClockNode("--header-timeout", "2")
    raw = connect(node)
    raw.send(HEALTH * 3)
    assert [r.code for r in responses(raw)] == [200, 200, 200]
    node.clock.advance(5)
    assert not raw.closing


@pytest.mark.parametrize("rest", [b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n",
                                  b"GET /heal"])
def test_a_pipelined_partial_request_is_on_the_clock_from_the_previous_response(
        rest: bytes) -> None:
    node = ClockNode("--header-timeout", "2")
    raw = connect(node)
    node.clock.advance(1)
    raw.send(HEALTH + rest)                     # answered at once; the rest waits
    assert [r.code for r in responses(raw)] == [200]
    node.clock.advance(1.9)
    assert not raw.closing
    node.clock.advance(0.2)
    assert raw.closing
    assert [r.code for r in responses(raw)] == [200, 408]


@pytest.mark.parametrize("front", ["fast", "twisted"])
def test_a_trickled_request_pipelined_behind_a_whole_one_is_cut_on_both_fronts(
        front: str) -> None:
    """A whole request, then the start of another whose header lines then
    come one every 1.5 s: the second is on the clock from the first's answer."""
    node = ClockNode("--http", front, "--header-timeout", "2")
    raw = Raw(node.http_factory())
    raw.send(rpc_request("stats.online") + HEALTH[:-2])
    node.clock.advance(0)
    assert [r.code for r in responses(raw)] == [200]
    node.clock.advance(1.5)
    raw.send(b"X-A: b\r\n")
    assert not raw.closing
    node.clock.advance(0.6)
    assert raw.closing, front
    assert [r.code for r in responses(raw)] == [200, 408]


@pytest.mark.parametrize("front", ["fast", "twisted"])
def test_a_partial_request_behind_a_parked_poll_on_both_fronts(front: str) -> None:
    node = ClockNode("--http", front, "--header-timeout", "2", "--max-timeout", "30")
    raw = Raw(node.http_factory())
    raw.send(rpc_request("session.create"))
    node.clock.advance(0)
    sid = responses(raw)[0].json()["result"]
    raw.send(rpc_request("session.get_events", sid, 10) + HEALTH[:20])
    node.clock.advance(9)
    assert len(responses(raw)) == 1 and not raw.closing   # the poll holds the clock
    node.clock.advance(1.01)                               # its empty answer starts it
    assert len(responses(raw)) == 2 and not raw.closing
    node.clock.advance(1.9)
    assert not raw.closing
    node.clock.advance(0.2)
    assert raw.closing and responses(raw)[-1].code == 408


@pytest.mark.parametrize("front", ["fast", "twisted"])
def test_keep_alive_requests_read_whole_are_never_cut(front: str) -> None:
    node = ClockNode("--http", front, "--header-timeout", "2", "--idle-timeout", "5")
    raw = Raw(node.http_factory())
    for _ in range(5):
        node.clock.advance(1.9)
        raw.send(rpc_request("stats.online"))
        node.clock.advance(0)
    assert [r.code for r in responses(raw)] == [200] * 5 and not raw.closing


# -- the idle timeout -----------------------------------------------------------------

def test_an_idle_connection_is_closed_after_the_idle_timeout() -> None:
    node = ClockNode("--header-timeout", "10", "--idle-timeout", "30")
    raw = connect(node)
    raw.send(HEALTH)
    assert responses(raw)[0].code == 200
    node.clock.advance(29.9)
    assert not raw.closing
    node.clock.advance(0.2)
    assert raw.closing
    assert len(responses(raw)) == 1             # closed without a word


def test_the_idle_timeout_defaults_to_30_s_above_the_longest_poll() -> None:
    node = ClockNode("--max-timeout", "5")
    raw = connect(node)
    raw.send(HEALTH)
    node.clock.advance(34.9)
    assert not raw.closing
    node.clock.advance(0.2)
    assert raw.closing


# -- a parked long-poll ---------------------------------------------------------------

def test_a_parked_poll_is_cut_by_neither_timer() -> None:
    node = ClockNode("--header-timeout", "2", "--idle-timeout", "5", "--max-timeout", "60")
    raw = connect(node)
    raw.send(rpc_request("session.create"))
    sid = responses(raw)[0].json()["result"]
    raw.send(rpc_request("session.get_events", sid, 60))
    for _ in range(59):
        node.clock.advance(1)
        assert not raw.closing
        assert len(responses(raw)) == 1          # still parked
    node.clock.advance(1.01)
    replies = responses(raw)
    assert len(replies) == 2 and replies[1].json()["result"] == []
    assert not raw.closing
    node.clock.advance(5.01)                     # then idle: closed
    assert raw.closing


class Later(Resource):
    """Answers every request when told to."""

    isLeaf = True

    def __init__(self) -> None:
        super().__init__()
        self.waiting: list = []

    def render(self, request):
        self.waiting.append(request)
        return NOT_DONE_YET


def test_a_bare_site_with_the_channel_keeps_a_pending_answer_open() -> None:
    clock = Clock()
    resource = Later()
    site = Site(resource, timeout=5, reactor=clock)
    site.protocol = deadline_protocol(1)
    transport = StringTransport(peerAddress=IPv4Address("TCP", "127.0.0.1", 4000))
    channel = site.buildProtocol(transport.getPeer())
    assert isinstance(channel, DeadlineChannel) and channel.headerTimeout == 1
    channel.makeConnection(transport)
    channel.dataReceived(b"GET /x HTTP/1.1\r\nHost: a\r\n\r\n")
    clock.advance(100)
    assert not transport.disconnecting and len(resource.waiting) == 1
    resource.waiting[0].write(b"late")
    resource.waiting[0].finish()
    assert transport.value().endswith(b"late\r\n0\r\n\r\n")
    clock.advance(4.9)
    assert not transport.disconnecting
    clock.advance(0.2)
    assert transport.disconnecting
    channel.connectionLost(None)
    assert clock.getDelayedCalls() == [] or all(not c.active()
                                                for c in clock.getDelayedCalls())


def test_no_timer_is_left_behind_when_the_connection_goes() -> None:
    clock = Clock()
    site = Site(Later(), timeout=5, reactor=clock)
    site.protocol = deadline_protocol(1)
    transport = StringTransport()
    channel = site.buildProtocol(None)
    channel.makeConnection(transport)
    channel.dataReceived(b"GET /x HTTP/1.1\r\n")
    channel.connectionLost(None)
    assert clock.getDelayedCalls() == []


# -- what twisted.web refuses before any resource: JSON too ----------------------------

@pytest.mark.parametrize("data", [
    b"GET /a b HTTP/1.1\r\nHost: x\r\n\r\n",           # a space in the target
    b"GET /\xff HTTP/1.1\r\nHost: x\r\n\r\n",          # a raw byte above ASCII
    b"GET / HTTP/9.9\r\nHost: x\r\n\r\n",
    b"GET /\r\n\r\n",
    b"GET / HTTP/1.1\r\nno colon here\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: ten\r\n\r\n",
    b"GET /" + b"a" * 20000 + b" HTTP/1.1\r\n\r\n",      # a line above MAX_LENGTH
    b"GET / HTTP/1.1\r\n" + b"X: " + b"y" * 17000 + b"\r\n\r\n",
])
def test_a_malformed_request_gets_a_json_400(data: bytes) -> None:
    node = ClockNode()
    raw = connect(node)
    raw.send(data)
    assert raw.closing
    (reply,) = responses(raw)
    assert reply.code == 400 and reply.header("content-type") == "application/json"
    assert reply.json() == {"error": "bad request"}
    node.clock.advance(60)                       # and no deadline fires afterwards
    assert len(responses(raw)) == 1
