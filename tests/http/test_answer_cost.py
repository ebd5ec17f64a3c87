"""What makes a long-poll answer cheaper on the fast front, held to the answers it gave before.

- A woken parked poll writes its answer through one callback
  (``routes.ReplyingCall``, ``Dispatcher.handle(then=...)``): the same
  answer as the Deferred path, nothing written once the client is gone.
"""
from __future__ import annotations

import json
import re
from typing import Any

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


def connection(node: ClockNode) -> Raw:
    return Raw(node.http_factory())


def answers(out: bytes) -> list[tuple[int, bytes]]:
    found = []
    for m in re.finditer(rb"HTTP/1.1 (\d+) [^\r]*\r\n(.*?)\r\n\r\n", out, re.S):
        length = re.search(rb"Content-Length: (\d+)", m.group(2))
        body = out[m.end():m.end() + int(length.group(1))] if length else b""
        found.append((int(m.group(1)), body))
    return found


# -- a woken poll answers through one callback ---------------------------------------------

def parked(node: ClockNode, sid: str) -> tuple[Raw, bytes]:
    raw = connection(node)
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
    assert isinstance(d, Deferred) and not seen
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

