"""Sessions moving between nodes: resume, numbering, ownership, expiry,
the registry down, online counting — several Nodes on one Clock sharing an
in-process registry, through their real JSON-RPC resources."""
from __future__ import annotations

import jwt
import pytest

from pushengine.cluster.record import SessionRecord, Subscription
from tests.cluster.nodes import MemoryCluster, stream

LIVE = "PublicLiveStreamView(limit=5)"
SECRET = "test-secret-of-enough-length-for-hs256"


@pytest.fixture
def cluster() -> MemoryCluster:
    return MemoryCluster(2)


def poll(node, sid, ack=None, timeout=0):
    params = [sid, timeout] if ack is None else [sid, timeout, ack]
    return node.rpc("session.get_events", *params)


def test_a_session_resumes_on_another_node_with_a_reset(cluster: MemoryCluster) -> None:
    a, b = cluster.nodes
    cluster.publish(stream(1, 10), stream(2, 20))
    sid = a.rpc("session.create")
    key, state = a.rpc("stream.subscribe_public_live", sid, 5)
    assert [o["id"] for o in state] == [2, 1]
    cluster.publish(stream(3, 30))
    events = poll(a, sid, 0)
    assert [(e["seq"], e["action"]) for e in events] == [(1, "insert")]
    entry = cluster.entry(sid)
    assert entry["owner"] == "node-0"
    assert SessionRecord.parse(entry).subs == [
        Subscription("PublicLiveStreamView", {}, 5, LIVE)]

    cluster.publish(stream(4, 40))           # the client misses this while it moves
    events = poll(b, sid, 1)                 # same id, another node, ack from node 0
    assert len(events) == 1
    reset = events[0]
    assert reset["action"] == "reset" and reset["key"] == LIVE and reset["seq"] == 2
    assert [o["id"] for o in reset["obj"]] == [4, 3, 2, 1]
    assert cluster.entry(sid)["owner"] == "node-1"
    assert sid in b.sessions and sid not in a.sessions   # node 0 dropped its copy
    assert b.registry.counters["resumes"] == 1 and b.registry.counters["moved_in"] == 1
    assert a.registry.counters["moved_out"] == 1

    cluster.publish(stream(5, 50))           # and it goes on from there
    events = poll(b, sid, 2)
    assert [(e["seq"], e["action"], e["obj"]["id"]) for e in events] == [(3, "insert", 5)]


def test_an_ack_from_the_old_node_is_never_ahead(cluster: MemoryCluster) -> None:
    """The entry's seq lags (it is refreshed every few seconds), the client's
    ack does not: the resumed session numbers above the ack."""
    a, b = cluster.nodes
    sid = a.rpc("session.create")
    a.rpc("stream.subscribe_public_live", sid, 5)
    for i in range(1, 8):
        cluster.publish(stream(i, i))
    assert [e["seq"] for e in poll(a, sid, 0)][-1] == 9   # 7 inserts, 2 deletes
    assert SessionRecord.parse(cluster.entry(sid)).seq == 0    # not refreshed yet
    events = poll(b, sid, 9)
    assert [(e["seq"], e["action"]) for e in events] == [(10, "reset")]


def test_resumed_by_a_subscribe_then_renumbered_by_the_first_poll(
        cluster: MemoryCluster) -> None:
    a, b = cluster.nodes
    sid = a.rpc("session.create")
    a.rpc("stream.subscribe_public_live", sid, 5)
    for i in range(1, 4):
        cluster.publish(stream(i, i))
    assert [e["seq"] for e in poll(a, sid, 0)] == [1, 2, 3]
    # the first call on node 1 is a subscribe: no ack to go by yet
    key, state = b.rpc("stream.subscribe_user", sid, 1, 5)
    assert [o["id"] for o in state] == [3, 2, 1]
    events = poll(b, sid, 3)     # the client acks what node 0 gave it
    assert [(e["seq"], e["action"], e["key"]) for e in events] == [(4, "reset", LIVE)]
    assert set(b.sessions[sid].subs) == {LIVE, key}
    cluster.publish(stream(9, 9))
    assert [e["seq"] for e in poll(b, sid, 4)] == [5, 6]   # an insert in each view


def test_a_wrong_ack_is_still_refused(cluster: MemoryCluster) -> None:
    a, _ = cluster.nodes
    sid = a.rpc("session.create")
    a.rpc("stream.subscribe_public_live", sid, 5)
    cluster.publish(stream(1, 1))
    error = a.rpc.error("session.get_events", sid, 0, 5)
    assert error.code == -32602 and "ahead" in error.message
    assert sid in a.sessions


def test_a_stale_copy_is_dropped_when_the_client_comes_back(cluster: MemoryCluster) -> None:
    """Node 0 missed the "moved" message: the client returns to it with an
    ack from node 1's numbering, and node 0 takes the session back."""
    a, b = cluster.nodes
    sid = a.rpc("session.create")
    a.rpc("stream.subscribe_public_live", sid, 5)
    a.registry.on_moved = None                     # the message is lost
    cluster.publish(stream(1, 1))
    poll(a, sid, 0)
    assert [e["seq"] for e in poll(b, sid, 1)] == [2]       # moved to node 1 (reset)
    cluster.publish(stream(2, 2))
    assert [e["seq"] for e in poll(b, sid, 2)] == [3]
    assert sid in a.sessions                                  # stale, unknown to node 0
    events = poll(a, sid, 3)
    assert [(e["seq"], e["action"]) for e in events] == [(4, "reset")]
    assert [o["id"] for o in events[0]["obj"]] == [2, 1]
    assert cluster.entry(sid)["owner"] == "node-0"
    assert sid not in b.sessions                              # node 1 was told


def test_a_write_from_a_stale_copy_drops_it(cluster: MemoryCluster) -> None:
    a, b = cluster.nodes
    sid = a.rpc("session.create")
    a.registry.on_moved = None
    poll(b, sid, 0)                                            # node 1 owns it now
    a.rpc("stream.subscribe_public_live", sid, 5)              # a call on the stale copy
    assert cluster.entry(sid)["owner"] == "node-1"             # not overwritten
    assert sid not in a.sessions


def test_the_user_and_private_views_come_along() -> None:
    cluster = MemoryCluster(2, "--secret", SECRET)
    a, b = cluster.nodes
    cluster.publish(stream(1, 1, user_id=7, public=False), stream(2, 2, user_id=8, public=False))
    sid = a.rpc("session.create")
    assert a.rpc("session.authorize", sid, jwt.encode({"sub": "7"}, SECRET)) == 7
    key, state = a.rpc("stream.subscribe_home", sid, [7, 8], 5)
    assert [o["id"] for o in state] == [1]
    events = poll(b, sid, 0)
    assert [(e["action"], [o["id"] for o in e["obj"]]) for e in events] == [("reset", [1])]
    assert b.sessions[sid].user == 7
    # authorized as 7 on the new node too
    assert b.rpc.error("session.authorize", sid, jwt.encode({"sub": "8"}, SECRET)).code == 1003


def test_unknown_sessions_are_still_1001(cluster: MemoryCluster) -> None:
    a, b = cluster.nodes
    for sid in ("nope-not-there-at-all", "x", "../../etc", "a" * 200):
        assert b.rpc.error("session.get_events", sid, 0).code == 1001
    assert b.registry.counters["lookups"] == 1      # only the plausible id was looked up


def test_destroy_removes_the_entry_wherever_it_is_called(cluster: MemoryCluster) -> None:
    a, b = cluster.nodes
    sid = a.rpc("session.create")
    assert cluster.entry(sid) is not None
    assert a.rpc("session.destroy", sid) is True
    assert cluster.entry(sid) is None
    assert b.rpc.error("session.get_events", sid, 0).code == 1001
    other = a.rpc("session.create")
    assert b.rpc("session.destroy", other) is True    # resumed there, then destroyed
    assert cluster.entry(other) is None and not a.sessions and not b.sessions


def test_expiry_removes_the_entry_only_for_its_owner(cluster: MemoryCluster) -> None:
    a, b = cluster.nodes
    mine = a.rpc("session.create")
    moved = a.rpc("session.create")
    a.registry.on_moved = None                   # node 0 keeps a stale copy of `moved`
    poll(b, moved, 0)
    cluster.clock.advance(60)
    poll(b, moved, 0)
    cluster.clock.advance(61)                    # node 0's two sessions expire
    assert mine not in a.sessions and moved not in a.sessions
    assert a.engine.sessions.expired == 2
    assert cluster.entry(mine) is None
    assert cluster.entry(moved)["owner"] == "node-1"


def test_polls_refresh_the_entry_at_most_once_per_interval(cluster: MemoryCluster) -> None:
    a, _ = cluster.nodes
    sid = a.rpc("session.create")
    ttl = a.registry.ttl
    assert cluster.table.ttl(sid) == ttl
    for _ in range(9):
        cluster.clock.advance(1)
        poll(a, sid)
    assert a.registry.counters["refreshes"] == 0 and a.registry.counters["writes"] == 1
    cluster.clock.advance(1)
    poll(a, sid)
    assert a.registry.counters["refreshes"] == 1 and cluster.table.ttl(sid) == ttl
    cluster.clock.advance(45)                    # a new online period: refreshed at once
    poll(a, sid)
    assert a.registry.counters["refreshes"] == 2
    assert int(cluster.entry(sid)["period"]) == int(cluster.clock.seconds() // 60)


def test_the_entry_outlives_a_parked_poll() -> None:
    cluster = MemoryCluster(2, "--session-timeout", "120", "--max-timeout", "90")
    a, b = cluster.nodes
    assert a.registry.ttl >= 120
    sid = a.rpc("session.create")
    a.rpc("stream.subscribe_public_live", sid, 5)
    cluster.clock.advance(9)
    parked = a.rpc.send("session.get_events", sid, 90, 0)
    cluster.clock.advance(89)                     # node 0 dies just before answering
    assert not parked.done
    assert [e["action"] for e in poll(b, sid, 0)] == ["reset"]


def test_registry_down_keeps_sessions_and_answers_1001_for_others(
        cluster: MemoryCluster) -> None:
    a, b = cluster.nodes
    sid = a.rpc("session.create")
    a.rpc("stream.subscribe_public_live", sid, 5)
    cluster.table.up = False
    health = a.http.get("/health")
    assert health.code == 200 and health.json()["status"] == "ok"
    assert health.json()["redis"]["up"] is False
    cluster.publish(stream(1, 1))
    assert [e["action"] for e in poll(a, sid, 0)] == ["insert"]     # served as before
    a.rpc("stream.subscribe_user", sid, 1, 5)                      # a write is dropped
    assert a.registry.counters["writes_dropped"] == 1
    assert b.rpc.error("session.get_events", sid, 0).code == 1001   # no resume
    new = a.rpc("session.create")                                   # dropped too
    assert a.registry.counters["writes_dropped"] == 2
    cluster.table.up = True
    poll(a, sid, 1)                                                 # the next poll rewrites
    poll(a, new, 0)
    assert len(SessionRecord.parse(cluster.entry(sid)).subs) == 2
    assert cluster.entry(new)["owner"] == "node-0"
    assert [e["action"] for e in poll(b, sid, 1)] == ["reset", "reset"]


def test_an_entry_lost_while_the_registry_was_away_is_written_again(
        cluster: MemoryCluster) -> None:
    a, _ = cluster.nodes
    sid = a.rpc("session.create")
    cluster.table.entries.clear()               # e.g. Redis restarted empty
    cluster.clock.advance(10)
    poll(a, sid)                                # the refresh finds nothing: write whole
    assert cluster.entry(sid)["owner"] == "node-0"


def test_a_session_counts_online_once_across_nodes() -> None:
    cluster = MemoryCluster(3)
    a, b, c = cluster.nodes
    sids = [a.rpc("session.create") for _ in range(4)]
    for sid in sids:
        a.rpc("stream.subscribe_public_live", sid, 5)
        poll(a, sid, 0)
    for sid in sids[:2]:
        poll(b, sid, 0)                         # moved within the period
    poll(c, sids[0], 0)                         # and again
    for node in cluster.nodes:
        assert node.rpc("stats.online") == 4
        assert node.rpc("stats.online", LIVE) == 4
    assert sum(len(n.sessions) for n in cluster.nodes) == 4
    cluster.clock.advance(60)                   # the next period: each counts once again
    for sid, node in zip(sids, [c, b, a, a]):
        poll(node, sid, 0)
    poll(a, sids[3], 0)
    cluster.clock.advance(60)
    assert a.rpc("stats.online") == 4 and a.rpc("stats.online", LIVE) == 4


def test_a_session_moved_across_a_period_counts_in_the_new_one(
        cluster: MemoryCluster) -> None:
    a, b = cluster.nodes
    sid = a.rpc("session.create")
    poll(a, sid, 0)
    cluster.clock.advance(60)
    poll(b, sid, 0)                              # node 0 did not count it in this period
    cluster.clock.advance(60)
    assert a.rpc("stats.online") == 1


def test_views_that_are_gone_are_left_out(cluster: MemoryCluster) -> None:
    a, b = cluster.nodes
    sid = a.rpc("session.create")
    a.rpc("stream.subscribe_public_live", sid, 5)
    entry = cluster.entry(sid)
    record = SessionRecord.parse(entry)
    record.subs.append(Subscription("RemovedView", {}, 5, "RemovedView(limit=5)"))
    record.subs.append(Subscription("UserStreamView", {"user_id": "x" * 10_000}, 5, "k"))
    cluster.table.put(sid, record.fields(), 100)
    events = poll(b, sid, 0)
    assert [(e["action"], e["key"]) for e in events] == [("reset", LIVE)]


def test_an_unreadable_entry_is_1001(cluster: MemoryCluster) -> None:
    a, b = cluster.nodes
    sid = a.rpc("session.create")
    cluster.table.put(sid, {"owner": "node-0", "v": "99"}, 100)
    assert b.rpc.error("session.get_events", sid, 0).code == 1001
    assert b.registry.counters["resume_failures"] == 1


def test_resume_respects_max_sessions() -> None:
    cluster = MemoryCluster(2, "--max-sessions", "1")
    a, b = cluster.nodes
    first, second = a.rpc("session.create"), b.rpc("session.create")
    assert b.rpc.error("session.get_events", first, 0).code == 1004
    assert cluster.entry(first)["owner"] == "node-0"
    assert second in b.sessions


def test_without_a_registry_nothing_changes() -> None:
    from tests.http.harness import ClockNode, Http, Rpc
    node = ClockNode()
    assert node.cluster is None and node.api.resume is None
    # no registry hook among the session hooks (others, e.g. stats.unique's, may be there)
    assert not any(type(h).__module__.startswith("pushengine.cluster") for h in node.api.hooks)
    rpc = Rpc(Http(node.web.resource()))
    sid = rpc("session.create")
    assert rpc.error("session.get_events", sid, 0, 3).code == -32602
    assert node.health()["redis"] == {"up": False, "kind": "none"}


def test_a_moved_message_drops_the_copy_once_the_registry_agrees(
        cluster: MemoryCluster) -> None:
    a, b = cluster.nodes
    sid = a.rpc("session.create")
    a.cluster.hooks.moved_away(sid)              # a stray message: still ours, kept
    assert sid in a.sessions
    a.registry.on_moved = None
    poll(b, sid, 0)                              # taken over, the message lost
    b.rpc("session.destroy", sid)                # and destroyed there
    assert sid in a.sessions
    a.cluster.hooks.moved_away(sid)              # (a late message): no entry, not ours
    assert sid not in a.sessions
    assert a.cluster.hooks.mirrors == {}
