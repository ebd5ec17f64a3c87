"""The relay's logic (pushengine/postgres/relay.py) with a fake reader and a
fake broker: how transactions become messages, the order in which positions
are confirmed, flow control and the failure path. No database, no broker:
the broker's answers are Deferreds the test fires (tests/deferreds.py)."""
from __future__ import annotations

import json
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from twisted.internet.defer import Deferred, succeed
from twisted.internet.task import Clock
from twisted.python.failure import Failure

from pushengine.core.changes import Change, decode_changes
from pushengine.core.positions import LSN_HEADER, PART_HEADER, XID_HEADER, Position
from pushengine.postgres.relay import FANOUT_KEYS, HOLDING, SENDING, STOPPED, Relay
from tests.deferreds import fired, pending


@dataclass(frozen=True)
class Txn:
    xid: int
    commit_lsn: int
    end_lsn: int
    changes: list = field(default_factory=list)


class FakeReader:
    def __init__(self):
        self.confirmed: list[int] = []
        self.paused = False
        self.pauses = 0
        self.resumes = 0
        self.stopped = False

    def confirm(self, lsn):
        self.confirmed.append(lsn)

    def pause(self):
        self.paused = True
        self.pauses += 1

    def resume(self):
        self.paused = False
        self.resumes += 1

    def stop(self):
        self.stopped = True
        return succeed(None)

    @property
    def sent_lsn(self):
        """What PostgreSQL was told: at once, unless a test says otherwise."""
        if self.told is not None:
            return self.told
        return self.confirmed[-1] if self.confirmed else None

    told = None


class FakeBroker:
    """``publish`` records each message with a Deferred the test fires."""

    def __init__(self):
        self.sent: list[tuple[bytes, tuple, dict, Deferred]] = []

    def publish(self, body, keys, headers):
        """One message, under every one of ``keys``."""
        d = Deferred()
        self.sent.append((body, tuple(keys), dict(headers), d))
        return d

    def waiting(self):
        return [m for m in self.sent if not m[3].called]

    def ack(self, index):
        self.sent[index][3].callback(None)

    def nack(self, index, why="refused"):
        self.sent[index][3].errback(Failure(RuntimeError(why)))

    def ack_all(self):
        for m in self.waiting():
            m[3].callback(None)

    def positions(self):
        return [Position.from_headers(m[2]) for m in self.sent]


def stream(i, user=1, **was):
    return Change("Stream", "upsert", i, {"id": i, "user_id": user}, was or None)


def txn(n, changes, xid=None):
    """Transaction number ``n`` (commit at 100*n, end at 100*n + 8)."""
    return Txn(xid if xid is not None else 1000 + n, 100 * n, 100 * n + 8, changes)


def by_user(change):
    keys = [f"Stream.n{change.obj['user_id']}"]
    if change.was and "user_id" in change.was:
        keys.append(f"Stream.n{change.was['user_id']}")
    return keys


def relay(route=None, ready=True, **kwargs):
    broker, reader, clock = FakeBroker(), FakeReader(), Clock()
    r = Relay(broker.publish, route, clock=clock, reader=reader, **kwargs)
    if ready:
        r.broker_ready()
    return r, broker, reader, clock


def ids(body):
    changes, errors = decode_changes(body)
    assert not errors
    return [c.id for c in changes]


# -- messages -------------------------------------------------------------------

def test_fanout_one_message_per_transaction_cut_into_parts():
    r, broker, reader, _ = relay(max_changes=500)
    r.deliver(txn(1, [stream(i) for i in range(1200)], xid=77))
    assert [len(ids(m[0])) for m in broker.sent] == [500, 500, 200]
    assert [m[1] for m in broker.sent] == [FANOUT_KEYS] * 3
    assert [m[2] for m in broker.sent] == [
        {LSN_HEADER: "0/64", XID_HEADER: "77", PART_HEADER: str(part)} for part in range(3)]
    assert ids(broker.sent[0][0]) + ids(broker.sent[1][0]) + ids(broker.sent[2][0]) \
        == list(range(1200))
    body = json.loads(broker.sent[0][0])
    assert body[0] == {"type": "Stream", "action": "upsert", "obj": {"id": 0, "user_id": 1}}


def test_a_transaction_of_one_change_is_one_message_with_its_position():
    r, broker, _, _ = relay()
    r.deliver(Txn(5, (3 << 32) | 0x10, (3 << 32) | 0x40, [stream(1)]))
    (body, keys, headers, _), = broker.sent
    assert keys == ("",) and headers == {LSN_HEADER: "3/10", XID_HEADER: "5", PART_HEADER: "0"}
    assert Position.from_headers(headers) == Position((3 << 32) | 0x10, 5, 0)


def test_interest_groups_by_keys_in_order_of_first_appearance():
    r, broker, _, _ = relay(route=by_user, max_changes=2)
    r.deliver(txn(1, [stream(1, 1), stream(2, 2), stream(3, 1), stream(4, 2),
                      stream(5, 1), stream(6, 3, user_id=1), stream(7, 3)]))
    got = [(m[1], ids(m[0]), m[2][PART_HEADER]) for m in broker.sent]
    assert got == [
        (("Stream.n1",), [1, 3], "0"),          # full: out at once
        (("Stream.n2",), [2, 4], "1"),
        (("Stream.n1",), [5], "2"),
        # an object that moved from user 1 to 3: one message under both keys
        (("Stream.n3", "Stream.n1"), [6], "3"),
        (("Stream.n3",), [7], "4"),
    ]


def apply_as_a_node(broker, bound):
    """What a node bound to the keys ``bound`` (None: every key) ends with,
    and each object's versions in the order it applied them: messages in
    publish order, the copies of one position applied once."""
    state, versions, last = {}, {}, None
    for body, keys, headers, _ in broker.sent:
        if bound is not None and not set(keys) & bound:
            continue
        p = Position.from_headers(headers)
        if last is not None and (p.lsn, p.part) <= last:
            continue
        last = (p.lsn, p.part)
        for c in decode_changes(body)[0]:
            state[c.id] = c.obj if c.action == "upsert" else None
            versions.setdefault(c.id, []).append(c.obj.get("v"))
    return state, versions


def test_an_object_that_moves_keeps_its_order_for_a_node_bound_to_every_key():
    # Z at A, X at K, X moves from K to A, X changes again at A: grouped by
    # keys alone, a node bound to A and K would apply A's message (X's last
    # version) before K's (X's first)
    r, broker, _, _ = relay(route=by_user)
    changes = [Change("Stream", "upsert", 9, {"id": 9, "user_id": 1, "v": 1}),
               Change("Stream", "upsert", 7, {"id": 7, "user_id": 2, "v": 1}),
               Change("Stream", "upsert", 7, {"id": 7, "user_id": 1, "v": 2}, {"user_id": 2}),
               Change("Stream", "upsert", 7, {"id": 7, "user_id": 1, "v": 3})]
    r.deliver(txn(1, changes))
    state, versions = apply_as_a_node(broker, None)
    assert state[7] == {"id": 7, "user_id": 1, "v": 3} and versions[7] == [1, 2, 3]
    assert apply_as_a_node(broker, {"Stream.n2"})[0] == {7: {"id": 7, "user_id": 1, "v": 2}}


@st.composite
def object_histories(draw):
    """A transaction's changes of a few objects over a few users, with
    ``was`` as the WAL reader gives it (the old routing value on a move)."""
    where: dict[int, int] = {}
    changes = []
    for v, (obj, user, delete) in enumerate(draw(st.lists(
            st.tuples(st.integers(1, 4), st.integers(1, 3), st.booleans()), max_size=30))):
        if delete and obj in where:
            changes.append(Change("Stream", "delete", obj,
                                  {"id": obj, "user_id": where.pop(obj), "v": v}))
            continue
        was = {"user_id": where[obj]} if obj in where and where[obj] != user else None
        where[obj] = user
        changes.append(Change("Stream", "upsert", obj, {"id": obj, "user_id": user, "v": v},
                              was))
    return changes


@settings(max_examples=300, deadline=None)
@given(object_histories(), st.integers(1, 4),
       st.sets(st.sampled_from(["Stream.n1", "Stream.n2", "Stream.n3"])))
def test_every_node_sees_each_objects_changes_in_wal_order(changes, max_changes, bound):
    r, broker, _, _ = relay(route=by_user, max_changes=max_changes)
    r.deliver(txn(1, changes))
    wal: dict = {}
    for c in changes:
        wal.setdefault(c.id, []).append(c.obj["v"])
    # a node bound to every key: each object's versions in WAL order, once
    _, versions = apply_as_a_node(broker, None)
    assert versions == wal
    # a node bound to some keys: what it sees of an object is in WAL order
    _, some = apply_as_a_node(broker, bound)
    for obj, seen in some.items():
        assert seen == [v for v in wal[obj] if v in seen]
    # each change in exactly one message (a message under two keys: one)
    assert sum(len(ids(m[0])) for m in broker.sent) == len(changes)


# -- confirmations ----------------------------------------------------------------

def test_positions_are_confirmed_in_order_when_the_broker_confirms_out_of_order():
    r, broker, reader, _ = relay(max_changes=1)
    r.deliver(txn(1, [stream(1), stream(2)]))     # messages 0, 1
    r.deliver(txn(2, [stream(3)]))                # message 2
    r.deliver(txn(3, [stream(4)]))                # message 3
    broker.ack(3)
    broker.ack(2)
    assert reader.confirmed == []
    broker.ack(1)
    assert reader.confirmed == []
    assert r.stats()["unconfirmed_messages"] == 1
    broker.ack(0)
    assert reader.confirmed == [308]              # once, for the three
    s = r.stats()
    assert (s["transactions"], s["messages"], s["changes"], s["confirmed_lsn"]) == (3, 4, 4, 308)
    assert s["unconfirmed_messages"] == s["unconfirmed_transactions"] == 0
    assert r.health()["confirmed_lsn"] == "0/134"


def test_each_transaction_is_confirmed_as_soon_as_it_and_those_before_it_are():
    r, broker, reader, _ = relay()
    for n in (1, 2, 3):
        r.deliver(txn(n, [stream(n)]))
    broker.ack(0)
    broker.ack(1)
    assert reader.confirmed == [108, 208]
    broker.ack(2)
    assert reader.confirmed == [108, 208, 308]


def test_an_empty_transaction_is_confirmed_behind_the_ones_before_it():
    r, broker, reader, _ = relay()
    r.deliver(txn(1, []))
    assert reader.confirmed == [108]           # nothing before it
    r.deliver(txn(2, [stream(1)]))
    r.deliver(txn(3, []))
    assert reader.confirmed == [108]
    broker.ack(0)
    assert reader.confirmed == [108, 308]


def test_nothing_is_published_before_the_broker_is_ready():
    r, broker, reader, _ = relay(ready=False)
    r.deliver(txn(1, [stream(1)]))
    assert broker.sent == [] and r.state == HOLDING
    r.broker_ready()
    assert r.state == SENDING and len(broker.sent) == 1
    broker.ack(0)
    assert reader.confirmed == [108]


def test_a_transaction_delivered_again_is_skipped():
    # a reader that reconnected streams again from the slot's confirmed position
    r, broker, reader, _ = relay()
    r.deliver(txn(1, [stream(1)]))
    r.deliver(txn(2, [stream(2)]))
    r.deliver(txn(1, [stream(1)]))
    r.deliver(txn(2, [stream(2)]))
    assert len(broker.sent) == 2 and r.stats()["skipped_transactions"] == 2
    broker.ack_all()
    assert reader.confirmed == [108, 208]


# -- flow control -------------------------------------------------------------------

def test_the_reader_is_paused_above_the_limit_and_resumed_below_half():
    r, broker, reader, _ = relay(max_messages=4)
    for n in range(1, 6):
        r.deliver(txn(n, [stream(n)]))
        assert reader.paused == (n == 5)
    for i in range(2):
        broker.ack(i)
    assert reader.paused                       # 3 unconfirmed, above 4 / 2
    broker.ack(2)
    assert not reader.paused and reader.resumes == 1
    assert r.stats()["pauses"] == 1


def test_the_reader_is_paused_above_the_limit_of_changes():
    r, broker, reader, _ = relay(max_pending_changes=10)
    r.deliver(txn(1, [stream(i) for i in range(8)]))
    assert not reader.paused
    r.deliver(txn(2, [stream(i) for i in range(3)]))
    assert reader.paused
    broker.ack(0)
    assert not reader.paused


# -- failures ---------------------------------------------------------------------

def test_a_refused_message_holds_and_sends_again_from_the_first_unconfirmed():
    r, broker, reader, clock = relay(retry=1.0)
    r.deliver(txn(1, [stream(1)]))
    r.deliver(txn(2, [stream(2)]))
    r.deliver(txn(3, [stream(3)]))
    broker.ack(0)
    assert reader.confirmed == [108]
    broker.nack(1)
    assert r.state == HOLDING and r.stats()["failures"] == 1
    broker.ack(2)                     # an answer from before the failure
    r.deliver(txn(4, [stream(4)]))     # held
    assert len(broker.sent) == 3 and reader.confirmed == [108]
    assert r.stats()["unconfirmed_messages"] == 3
    clock.advance(1.0)
    assert r.state == SENDING and r.stats()["resends"] == 1
    assert [p.lsn for p in broker.positions()[3:]] == [200, 300, 400]
    broker.ack_all()
    assert reader.confirmed == [108, 208, 308, 408]
    assert r.stats()["unconfirmed_messages"] == 0


def test_the_back_off_grows_while_the_broker_keeps_refusing():
    r, broker, reader, clock = relay(retry=1.0, max_retry=3.0)
    r.deliver(txn(1, [stream(1)]))
    broker.nack(0)
    clock.advance(1.0)
    broker.nack(1)
    clock.advance(1.9)
    assert len(broker.sent) == 2
    clock.advance(0.1)
    broker.nack(2)
    clock.advance(2.9)
    assert len(broker.sent) == 3       # capped at 3 s
    clock.advance(0.1)
    broker.ack(3)
    assert reader.confirmed == [108] and r.stats()["failures"] == 3


def test_a_lost_connection_holds_until_the_broker_is_back():
    r, broker, reader, clock = relay()
    r.deliver(txn(1, [stream(1)]))
    r.broker_lost()
    broker.nack(0, "connection lost")  # the publisher fails what was in flight
    r.deliver(txn(2, [stream(2)]))
    clock.advance(60)
    assert len(broker.sent) == 1 and r.state == HOLDING
    r.broker_ready()
    assert [p.lsn for p in broker.positions()[1:]] == [100, 200]
    broker.ack_all()
    assert reader.confirmed == [108, 208]


def test_a_publish_that_raises_counts_as_refused():
    calls = []

    def publish(body, keys, headers):
        calls.append(headers)
        if len(calls) == 1:
            raise RuntimeError("no channel")
        return succeed(None)

    reader, clock = FakeReader(), Clock()
    r = Relay(publish, clock=clock, reader=reader, retry=0.5)
    r.broker_ready()
    r.deliver(txn(1, [stream(1)]))
    assert r.state == HOLDING and reader.confirmed == []
    clock.advance(0.5)
    assert reader.confirmed == [108] and len(calls) == 2


def test_a_failure_of_a_whole_transaction_sends_every_part_again():
    r, broker, reader, clock = relay(max_changes=1, retry=1.0)
    r.deliver(txn(1, [stream(1), stream(2), stream(3)]))
    broker.ack(0)
    broker.nack(1)
    broker.ack(2)
    clock.advance(1)
    assert [p.part for p in broker.positions()[3:]] == [0, 1, 2]
    broker.ack_all()
    assert reader.confirmed == [108]


# -- stopping -------------------------------------------------------------------------

def test_stop_waits_for_the_broker_then_stops_the_reader():
    r, broker, reader, clock = relay()
    r.deliver(txn(1, [stream(1)]))
    stopping = r.stop(timeout=5)
    assert reader.paused and pending(stopping) and not reader.stopped
    broker.ack(0)
    assert fired(stopping) is None
    assert reader.confirmed == [108] and reader.stopped and r.state == STOPPED
    r.deliver(txn(2, [stream(2)]))
    assert len(broker.sent) == 1


def test_stop_lets_the_reader_tell_postgresql_first():
    r, broker, reader, clock = relay()
    r.deliver(txn(1, [stream(1)]))
    reader.told = 0
    stopping = r.stop(timeout=5)
    broker.ack(0)
    assert reader.confirmed == [108] and not reader.stopped
    clock.advance(0.05)
    assert not reader.stopped
    reader.told = 108
    clock.advance(0.05)
    assert fired(stopping) is None and reader.stopped


def test_stop_waits_for_the_reader_to_tell_postgresql_two_seconds_at_most():
    r, broker, reader, clock = relay()
    r.deliver(txn(1, [stream(1)]))
    reader.told = 0
    stopping = r.stop(timeout=5)
    broker.ack(0)
    clock.pump([0.05] * 39)
    assert not reader.stopped
    clock.pump([0.05] * 2)
    assert fired(stopping) is None and reader.stopped


def test_stop_gives_up_waiting_after_the_timeout():
    r, broker, reader, clock = relay()
    r.deliver(txn(1, [stream(1)]))
    stopping = r.stop(timeout=5)
    clock.advance(5)
    assert fired(stopping) is None and reader.stopped and reader.confirmed == []
    broker.ack(0)                       # too late: the next relay sends it again
    assert reader.confirmed == []


def test_health_says_what_waits():
    r, broker, reader, _ = relay(ready=False)
    r.deliver(txn(1, [stream(1)]))
    h = r.health()
    assert h["state"] == HOLDING and h["broker"] == "disconnected"
    assert h["first_unconfirmed_lsn"] == "0/64" and h["unconfirmed_messages"] == 1


# -- the invariant ----------------------------------------------------------------------

@st.composite
def scenarios(draw):
    sizes = draw(st.lists(st.integers(0, 5), min_size=1, max_size=12))
    steps = draw(st.lists(st.tuples(st.sampled_from("dddaaaaffnlr"), st.integers(0, 50)),
                          max_size=80))
    return sizes, steps, draw(st.integers(1, 3)), draw(st.integers(1, 6))


@settings(max_examples=300, deadline=None)
@given(scenarios())
def test_a_confirmed_position_never_passes_an_unconfirmed_message(scenario):
    """Whatever the order of deliveries, broker answers, refusals and lost
    connections: every position the reader is told is covered by broker
    confirms of every message of every transaction up to it; positions only
    grow; each round of sending goes in position order; and once the broker
    confirms everything, the last transaction is confirmed."""
    sizes, steps, max_changes, max_messages = scenario
    broker, clock = FakeBroker(), Clock()
    txns = [txn(n + 1, [stream(10 * n + i) for i in range(size)])
            for n, size in enumerate(sizes)]
    parts = {t.commit_lsn: -(-len(t.changes) // max_changes) for t in txns}
    acked: set[tuple[int, int]] = set()

    class CheckingReader(FakeReader):
        def confirm(self, lsn):
            assert not self.confirmed or lsn > self.confirmed[-1]
            for t in txns:
                if t.end_lsn <= lsn:
                    assert all((t.commit_lsn, p) in acked for p in range(parts[t.commit_lsn]))
            super().confirm(lsn)

    reader = CheckingReader()
    rounds: list[int] = []

    def publish(body, keys, headers):
        rounds.append(r.resends)
        return broker.publish(body, keys, headers)

    r = Relay(publish, clock=clock, reader=reader, max_changes=max_changes,
              max_messages=max_messages, retry=1.0)

    def answer(index, ok):
        body, keys, headers, d = broker.waiting()[index % len(broker.waiting())]
        if ok:
            p = Position.from_headers(headers)
            acked.add((p.lsn, p.part))
            d.callback(None)
        else:
            d.errback(Failure(RuntimeError("nack")))

    delivered = 0
    r.broker_ready()
    for kind, n in steps:
        if kind == "d" and delivered < len(txns) and not reader.paused:
            r.deliver(txns[delivered])
            delivered += 1
        elif kind in "af" and broker.waiting():
            answer(n, kind == "a")
        elif kind == "n" and broker.waiting():
            answer(n, True)
        elif kind == "l":
            r.broker_lost()
        elif kind == "r":
            r.broker_ready()
        clock.advance(0.5)
    # then a good broker to the end
    r.broker_ready()
    for _ in range(10_000):
        if delivered == len(txns) and not broker.waiting():
            break
        if broker.waiting():
            answer(0, True)
        elif not reader.paused:
            r.deliver(txns[delivered])
            delivered += 1
        clock.advance(1)
    assert reader.confirmed and reader.confirmed[-1] == txns[-1].end_lsn
    assert r.stats()["unconfirmed_messages"] == 0
    # within each round of sending (between two resends), messages go out
    # in position order
    for round_ in set(rounds):
        sent = [p for p, n in zip(broker.positions(), rounds) if n == round_]
        assert sent == sorted(set(sent), key=lambda p: (p.lsn, p.part))


@pytest.mark.parametrize("bad", [dict(max_changes=0), dict(max_messages=0)])
def test_limits_must_be_positive(bad):
    with pytest.raises(ValueError):
        Relay(FakeBroker().publish, clock=Clock(), **bad)


def test_a_gap_is_published_in_order_after_what_came_before():
    """A TRUNCATE (the reader's gap) becomes a message of no change with the
    gap header, published after the transactions before it, to the keys
    every node binds."""
    from twisted.internet.task import Clock

    from pushengine.core.changes import Change
    from pushengine.core.positions import GAP_HEADER
    from pushengine.postgres.relay import Relay
    from pushengine.postgres.wal import Transaction
    sent = []

    def publish(body, keys, headers):
        from twisted.internet.defer import succeed
        sent.append((body, tuple(keys), dict(headers)))
        return succeed(None)
    relay = Relay(publish, None, clock=Clock(), gap_keys=("%all",))
    relay.broker_ready()
    relay.deliver(Transaction(5, 100, 110, [Change("Stream", "upsert", 1, {"id": 1}, xid=5)]))
    relay.gap()
    assert [s[2].get(GAP_HEADER) for s in sent] == [None, "1"]
    assert sent[1][0] == b"[]" and sent[1][1] == ("%all",)
    assert relay.gaps == 1
