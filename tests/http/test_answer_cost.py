"""What makes a long-poll answer cheaper on the fast front, held to the answers it gave before.

- A request head read again (``FastChannel._remember``): a keep-alive client
  polling again sends the same head; the front reuses what the parser made
  of it. Every other head — a header changed, another Content-Length,
  pipelined requests, a request split over reads, a malformed head — goes
  through the parser. Each case is sent to two connections of the same node,
  one remembering heads and one not, and the answers must be the same bytes
  (Date aside); a hypothesis test does it for generated sequences.
- A woken parked poll writes its answer through one callback
  (``routes.ReplyingCall``, ``Dispatcher.handle(then=...)``): the same
  answer as the Deferred path, nothing written once the client is gone.
"""
from __future__ import annotations

import json
import re
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from twisted.internet.defer import Deferred

from pushengine.api.caller import Caller
from pushengine.api.rpc import RpcAnswer
from pushengine.core.changes import Change
from pushengine.web.fastpath import FastChannel
from tests.http.harness import ClockNode, Raw, http_request

CALLER = Caller("127.0.0.1", loopback=True)
DATE = re.compile(rb"Date: [^\r]*\r\n")


def stream(i: int, **extra: Any) -> Change:
    return Change("Stream", "upsert", i, {
        "id": i, "title": f"s{i}", "user_id": 1, "live": True, "public": True,
        "created_at": f"2030-01-01T00:00:0{i}Z", **extra})


def node_with_events(*argv: str) -> tuple[ClockNode, str]:
    node = ClockNode("--client-rate", "0", *argv)
    sid = node.api.session_create(CALLER)
    node.api.session_subscribe(sid, node.catalog.methods["stream.subscribe_public_live"].name,
                               {}, 50)
    node.engine.apply_changes([stream(i) for i in range(3)])
    return node, sid


class Counted:
    """The connection's parser, counting the bytes it is fed."""

    def __init__(self, parser: Any) -> None:
        self.parser = parser
        self.fed = 0

    def feed_data(self, data: bytes) -> None:
        self.fed += 1
        self.parser.feed_data(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.parser, name)


def connection(node: ClockNode, remember: bool) -> tuple[Raw, Counted]:
    factory = node.http_factory()
    factory.reuse_heads = remember
    raw = Raw(factory)
    channel: FastChannel = raw.protocol
    counted = Counted(channel.parser)
    channel.parser = counted
    return raw, counted


def poll(sid: str, id_: Any = 1, ack: int = 0, headers: dict | None = None,
         length: int | None = None) -> bytes:
    body = json.dumps({"jsonrpc": "2.0", "id": id_, "method": "session.get_events",
                       "params": [sid, 0, ack]}).encode()
    return http_request("POST", "/api/jsonrpc", body,
                        {"Content-Type": "application/json", **(headers or {})}, length)


def both(node: ClockNode, reads: list[bytes]) -> tuple[bytes, int, int]:
    """``reads`` sent to a connection remembering heads and to one that
    does not: the answers (the same, Date aside), and how often each
    connection's parser was fed."""
    outs, fed = [], []
    for remember in (True, False):
        raw, parser = connection(node, remember)
        for data in reads:
            if not raw.closing:
                raw.send(data)
        node.clock.advance(0)
        outs.append(DATE.sub(b"", raw.transport.value()))
        fed.append(parser.fed)
    assert outs[0] == outs[1]
    return outs[0], fed[0], fed[1]


def answers(out: bytes) -> list[tuple[int, bytes]]:
    found = []
    for m in re.finditer(rb"HTTP/1.1 (\d+) [^\r]*\r\n(.*?)\r\n\r\n", out, re.S):
        length = re.search(rb"Content-Length: (\d+)", m.group(2))
        body = out[m.end():m.end() + int(length.group(1))] if length else b""
        found.append((int(m.group(1)), body))
    return found


def test_the_same_head_again_is_not_parsed_again():
    node, sid = node_with_events()
    out, fed, fed_without = both(node, [poll(sid)] * 5)
    assert fed == 1 and fed_without == 5
    got = answers(out)
    assert [status for status, _ in got] == [200] * 5
    assert len(json.loads(got[4][1])["result"]) == 3


def test_the_same_head_with_another_body_answers_that_body():
    node, sid = node_with_events()
    out, fed, _ = both(node, [poll(sid, id_=1), poll(sid, id_=2), poll(sid, id_=3)])
    assert fed == 1
    assert [json.loads(body)["id"] for _, body in answers(out)] == [1, 2, 3]


def test_a_changed_header_is_parsed():
    node, sid = node_with_events("--cors-origin", "https://a.example")
    reads = [poll(sid), poll(sid, headers={"Origin": "https://a.example"}),
             poll(sid, headers={"Origin": "https://a.example"}),
             poll(sid, headers={"X-Other": "1"})]
    out, fed, fed_without = both(node, reads)
    assert fed == 3 and fed_without == 4
    assert out.count(b"Access-Control-Allow-Origin") >= 2


def test_another_length_is_parsed():
    node, sid = node_with_events()
    out, fed, _ = both(node, [poll(sid, id_=1), poll(sid, id_=10), poll(sid, id_=100)])
    assert fed == 3
    assert [json.loads(body)["id"] for _, body in answers(out)] == [1, 10, 100]


def test_pipelined_and_split_requests_are_parsed():
    node, sid = node_with_events()
    one = poll(sid)
    reads = [one, one + one, one[:20], one[20:], one[:-3], one[-3:], one]
    out, fed, fed_without = both(node, reads)
    assert fed_without == 7
    assert fed == 6                         # the last read alone is the head again
    assert [status for status, _ in answers(out)] == [200] * 6


def test_a_malformed_head_is_parsed_and_refused():
    node, sid = node_with_events()
    one = poll(sid)
    broken = one.replace(b"Content-Type", b"Content Type")
    out, fed, fed_without = both(node, [one, broken, one])
    assert fed == fed_without == 2          # the connection closed after the 400
    assert [status for status, _ in answers(out)] == [200, 400]


def test_a_body_longer_than_its_head_says_is_parsed():
    node, sid = node_with_events()
    one = poll(sid)
    out, fed, _ = both(node, [one, one + b"x", one])
    assert fed == 2
    assert [status for status, _ in answers(out)][:2] == [200, 200]


def test_keys_still_apply_to_a_head_read_again():
    node, sid = node_with_events("--api-key", "sekrit")
    good = poll(sid, headers={"X-Api-Key": "sekrit"})
    bad = poll(sid, headers={"X-Api-Key": "sekrez"})
    out, fed, _ = both(node, [good, good, bad, bad, good])
    assert fed == 3
    assert [status for status, _ in answers(out)] == [200, 200, 403, 403, 200]


def test_a_head_that_closes_expects_or_is_too_long_is_never_remembered():
    node, sid = node_with_events()
    for headers in ({"Expect": "100-continue"}, {"Connection": "close"},
                    {"X-Long": "x" * 3000}, {"Transfer-Encoding": "identity"}):
        raw, _ = connection(node, True)
        raw.send(poll(sid, headers=headers))
        assert raw.protocol.head is None
    raw, _ = connection(node, True)
    raw.send(poll(sid))
    assert raw.protocol.head is not None


reads_of = st.sampled_from(["same", "same", "same", "other-id", "longer-id", "header",
                            "pipelined", "split", "broken", "extra-byte"])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(reads_of, min_size=1, max_size=8))
def test_answers_are_the_same_with_and_without_remembered_heads(kinds):
    node, sid = node_with_events()
    one = poll(sid)
    made = {"same": [one], "other-id": [poll(sid, id_=7)], "longer-id": [poll(sid, id_=77)],
            "header": [poll(sid, headers={"User-Agent": "x"})], "pipelined": [one + one],
            "split": [one[:30], one[30:]], "broken": [one.replace(b"HTTP/1.1", b"HTTP/9.9")],
            "extra-byte": [one + b"P"]}
    both(node, [data for kind in kinds for data in made[kind]])


# -- a woken poll answers through one callback ---------------------------------------------

def parked(node: ClockNode, sid: str) -> tuple[Raw, bytes]:
    raw, _ = connection(node, True)
    body = json.dumps({"jsonrpc": "2.0", "id": 5, "method": "session.get_events",
                       "params": [sid, 30, node.engine.sessions.last_seq(node.engine.sessions.sessions[sid])]})
    raw.send(http_request("POST", "/api/jsonrpc", body.encode(),
                          {"Content-Type": "application/json"}))
    node.clock.advance(0)
    assert raw.transport.value() == b""
    return raw, body.encode()


def test_a_woken_poll_is_answered_at_once_with_its_events():
    node, sid = node_with_events()
    raw, _ = parked(node, sid)
    channel: FastChannel = raw.protocol
    assert channel.answering is not None and channel.replying is not None
    node.engine.apply_changes([stream(1, viewers=9)])
    got = answers(raw.transport.value())
    assert [status for status, _ in got] == [200]
    answer = json.loads(got[0][1])
    assert answer["id"] == 5 and answer["result"]
    assert channel.answering is None and channel.replying is None


def test_a_woken_poll_answers_as_on_the_deferred_path():
    node, sid = node_with_events()
    raw, body = parked(node, sid)
    node.engine.apply_changes([stream(1, viewers=9)])
    fast = answers(raw.transport.value())[0][1]
    # the same poll, the same change, through the dispatcher's Deferred
    node2, sid2 = node_with_events()
    body2 = body.replace(sid.encode(), sid2.encode())
    d = node2.dispatcher.handle(body2, CALLER)
    assert isinstance(d, Deferred)
    got: list[RpcAnswer] = []
    d.addCallback(got.append)
    node2.engine.apply_changes([stream(1, viewers=9)])
    assert got and got[0].body is not None
    assert json.loads(fast) == json.loads(got[0].body)


def test_a_poll_whose_client_went_away_writes_nothing():
    node, sid = node_with_events()
    raw, _ = parked(node, sid)
    channel: FastChannel = raw.protocol
    raw.transport.loseConnection()
    channel.connectionLost(None)
    assert node.engine.sessions.sessions[sid].delivery is None
    node.engine.apply_changes([stream(1, viewers=9)])
    assert raw.transport.value() == b""


def test_then_is_called_once_and_not_after_a_cancel():
    node, sid = node_with_events()
    seq = node.engine.sessions.last_seq(node.engine.sessions.sessions[sid])
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "session.get_events",
                       "params": [sid, 30, seq]}).encode()
    seen: list[RpcAnswer] = []
    d = node.dispatcher.handle(body, CALLER, seen.append)
    # a parked poll that answers through then: no Deferred, only a cancel
    assert not isinstance(d, (Deferred, RpcAnswer)) and callable(d.cancel) and not seen
    node.engine.apply_changes([stream(1, viewers=9)])
    assert len(seen) == 1 and seen[0].status == 200
    d2 = node.dispatcher.handle(body.replace(b"%d]" % seq, b"%d]" % (seq + 1)), CALLER,
                                seen.append)
    d2.cancel()
    node.engine.apply_changes([stream(1, viewers=10)])
    assert len(seen) == 1


def test_a_batch_that_waits_hands_its_answer_to_then():
    node, sid = node_with_events()
    seq = node.engine.sessions.last_seq(node.engine.sessions.sessions[sid])
    body = json.dumps([{"jsonrpc": "2.0", "id": 1, "method": "session.get_events",
                        "params": [sid, 30, seq]},
                       {"jsonrpc": "2.0", "id": 2, "method": "stats.online"}]).encode()
    seen: list[RpcAnswer] = []
    node.dispatcher.handle(body, CALLER, seen.append)
    node.engine.apply_changes([stream(1, viewers=9)])
    assert len(seen) == 1
    assert [a["id"] for a in json.loads(seen[0].body)] == [1, 2]


def test_a_request_with_bytes_after_it_is_not_remembered():
    node, sid = node_with_events()
    one = poll(sid)
    for after in (b"\r\n", b"P", b"x"):
        raw, _ = connection(node, True)
        raw.send(one + after)
        assert raw.protocol.head is None
