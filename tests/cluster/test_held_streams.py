"""Registry entries of sessions held by streams: written with ``held`` and a
long TTL when the stream attaches, refreshed when their seq changed or on a
slow schedule spread over time, written back without ``held`` when the
stream ends; a session moving nodes is still counted once per period."""
from __future__ import annotations

import pytest

from pushengine.cluster.record import SessionRecord
from tests.cluster.nodes import MemoryCluster, stream

PERIOD = 60.0
TICK = 10.0        # the service runs touch_streams every min(10, period / 2) s


class Stream:
    """A stream delivery (SSE, WebSocket) as the core sees it."""
    holds_session = True

    def __init__(self) -> None:
        self.closed = False

    def notify(self, session) -> None:
        session.manager.take(session, False)    # written to the client

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def cluster() -> MemoryCluster:
    return MemoryCluster(2)


def attach(node, sid: str) -> Stream:
    delivery = Stream()
    result = node.api.stream(sid, delivery, None)
    assert getattr(result, "result", result).id == sid
    return delivery


def run(cluster: MemoryCluster, seconds: float) -> None:
    """Let time pass, each node's timer counting its streams as it runs."""
    for _ in range(int(seconds / TICK)):
        cluster.clock.advance(TICK)
        for node in cluster.nodes:
            node.api.touch_streams()


def held_sessions(cluster: MemoryCluster, node, n: int) -> list[str]:
    sids = []
    for _ in range(n):
        sid = node.rpc("session.create")
        node.rpc("stream.subscribe_public_live", sid, 5)
        attach(node, sid)
        sids.append(sid)
    return sids


def test_an_idle_stream_costs_no_registry_operation_for_most_of_an_hour(cluster) -> None:
    a, _ = cluster.nodes
    [sid] = held_sessions(cluster, a, 1)
    entry = SessionRecord.parse(cluster.entry(sid))
    assert entry.held and entry.owner == "node-0"
    assert cluster.table.ttl(sid) == pytest.approx(a.cluster.hooks.held_ttl)
    assert a.cluster.hooks.held_ttl >= 3600
    before = dict(a.registry.counters)
    run(cluster, 600)                               # ten minutes: nothing due yet
    assert a.registry.counters["refreshes"] == before["refreshes"]
    assert a.registry.counters["writes"] == before["writes"]
    run(cluster, 3 * 3600)                          # hours: the entry never lapses
    assert SessionRecord.parse(cluster.entry(sid)).held
    refreshes = a.registry.counters["refreshes"] - before["refreshes"]
    assert 9 <= refreshes <= 3 * 3600 / 600 + 1     # one every 10 to 20 minutes
    assert a.registry.counters["writes"] == before["writes"]


def test_the_slow_refreshes_of_streams_attached_together_are_spread(cluster) -> None:
    a, _ = cluster.nodes
    held_sessions(cluster, a, 60)
    per_minute = []
    for _ in range(40):                             # forty minutes
        before = a.registry.counters["refreshes"]
        run(cluster, 60)
        per_minute.append(a.registry.counters["refreshes"] - before)
    assert sum(per_minute[:9]) == 0                 # none before half the interval
    assert sum(per_minute[:21]) == 60               # each once by the whole of it
    assert max(per_minute) <= 15                    # no burst of all of them


def test_the_entry_follows_the_seq_of_a_stream_with_events(cluster) -> None:
    a, _ = cluster.nodes
    [sid] = held_sessions(cluster, a, 1)
    run(cluster, PERIOD)
    refreshes = a.registry.counters["refreshes"]
    cluster.publish(stream(1, 10), stream(2, 20))
    session = a.engine.sessions.get(sid)
    assert a.engine.sessions.last_seq(session) == 2
    run(cluster, PERIOD)                            # looked at once per period
    assert SessionRecord.parse(cluster.entry(sid)).seq == 2
    assert a.registry.counters["refreshes"] == refreshes + 1
    run(cluster, 2 * PERIOD)                        # no change since: no refresh
    assert a.registry.counters["refreshes"] == refreshes + 1


def test_when_the_stream_ends_the_entry_gets_the_usual_ttl_back(cluster) -> None:
    a, _ = cluster.nodes
    [sid] = held_sessions(cluster, a, 1)
    run(cluster, 3 * PERIOD)
    delivery = a.engine.sessions.get(sid).delivery
    a.engine.sessions.detach(a.engine.sessions.get(sid), delivery)   # the client went away
    record = SessionRecord.parse(cluster.entry(sid))
    now = int(cluster.clock.seconds() // PERIOD)
    assert not record.held and record.period == now   # counted in this period
    assert cluster.table.ttl(sid) == pytest.approx(a.registry.ttl)
    run(cluster, a.engine.sessions.settings.session_timeout + TICK)
    assert sid not in a.sessions and cluster.entry(sid) is None   # expired, released


def test_a_stream_ended_before_the_period_was_counted_says_the_one_before(cluster) -> None:
    a, _ = cluster.nodes
    [sid] = held_sessions(cluster, a, 1)
    run(cluster, 2 * PERIOD)
    cluster.clock.advance(PERIOD - cluster.clock.seconds() % PERIOD + 1)  # a new period
    session = a.engine.sessions.get(sid)
    writes = a.registry.counters["writes"]
    a.engine.sessions.detach(session, session.delivery)   # before the timer counted it
    assert a.registry.counters["writes"] == writes + 1
    record = SessionRecord.parse(cluster.entry(sid))
    assert record.period == int(cluster.clock.seconds() // PERIOD) - 1


def test_a_held_session_moving_nodes_counts_once_in_the_period(cluster) -> None:
    a, b = cluster.nodes
    sids = held_sessions(cluster, a, 3)
    run(cluster, 5 * PERIOD)                        # entries written long ago
    for sid in sids:
        assert SessionRecord.parse(cluster.entry(sid)).period < \
            int(cluster.clock.seconds() // PERIOD)
    moved = sids[0]                                 # its node dies: the client reconnects
    attach(b, moved)
    assert cluster.entry(moved)["owner"] == "node-1"
    assert SessionRecord.parse(cluster.entry(moved)).held
    figure = a.online._counter(None).counts().result[1]
    assert figure == 3                              # counted once, by node 0
    run(cluster, PERIOD)                            # the next period: node 1 counts it
    assert a.online._counter(None).counts().result[1] == 3


def test_a_session_whose_stream_ended_moving_nodes_counts_again(cluster) -> None:
    """(It did before: ``held`` must not make it look counted.)"""
    a, b = cluster.nodes
    [sid] = held_sessions(cluster, a, 1)
    run(cluster, PERIOD)
    session = a.engine.sessions.get(sid)
    a.engine.sessions.detach(session, session.delivery)
    cluster.clock.advance(PERIOD - cluster.clock.seconds() % PERIOD + 1)  # a new period
    for node in cluster.nodes:
        node.api.touch_streams()                    # not held, not polling: not online
    assert a.online._counter(None).counts().result[1] is None
    attach(b, sid)
    assert a.online._counter(None).counts().result[1] == 1
