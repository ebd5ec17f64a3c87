"""One delivery per session (SPEC section 10): streams, replay, replacement,
backpressure and expiry, on a Clock with a stream that records what it gets."""
from __future__ import annotations

import json

import pytest
from hypothesis import given, settings, strategies as st

from pushengine.core.events import DROPPED
from tests.core.helpers import delete, get_events, make_engine, upsert
from tests.deferreds import fired

VIEWS = {"Live": {"type": "Stream", "params": ["limit"], "where": {"live": True},
                  "order": "-n", "limit": {"default": 3, "max": 10}}}


def stream(id_, n=0, **kw):
    return {"id": id_, "n": n, "live": True, "public": True, **kw}


class FakeStream:
    """A stream delivery: keeps the events it was written; ``full`` stops it."""

    holds_session = True

    def __init__(self) -> None:
        self.events: list[dict] = []
        self.full = False
        self.closed = False

    def write(self, first, fragments) -> None:
        assert not self.closed
        self.events.extend(json.loads('{"seq":%d,%s' % (seq, f))
                           for seq, f in enumerate(fragments, first) if f is not DROPPED)

    def notify(self, session) -> None:
        if not self.full and not self.closed:
            session.manager.events_out += session.log.write(self.write)

    def close(self) -> None:
        self.closed = True

    @property
    def seqs(self) -> list[int]:
        return [e["seq"] for e in self.events]


def setup(**settings):
    engine, clock = make_engine(VIEWS, max_queue=5, session_timeout=60, **settings)
    session = engine.sessions.create()
    bound = engine.catalog.views["Live"].bind({}, None, 3)
    fired(engine.sessions.subscribe(session, bound))
    return engine, clock, session


def test_a_stream_gets_events_as_they_come():
    engine, clock, s = setup()
    out = FakeStream()
    engine.sessions.attach(s, out)
    engine.apply_changes([upsert(stream(1, 1))])
    engine.apply_changes([upsert(stream(2, 2)), upsert(stream(1, 5))])
    assert out.seqs == [1, 2, 3]
    assert [e["action"] for e in out.events] == ["insert", "insert", "update"]


def test_queued_events_are_written_on_attach():
    engine, clock, s = setup()
    engine.apply_changes([upsert(stream(1, 1)), upsert(stream(2, 2))])
    out = FakeStream()
    engine.sessions.attach(s, out)
    assert out.seqs == [1, 2]


def test_reconnect_with_last_seq_replays_later_events_once_in_order():
    engine, clock, s = setup()
    first = FakeStream()
    engine.sessions.attach(s, first)
    engine.apply_changes([upsert(stream(i, i)) for i in range(1, 4)])
    assert first.seqs == [1, 2, 3]
    engine.sessions.detach(s, first)            # the connection dropped after seq 1 arrived
    engine.apply_changes([upsert(stream(1, 10))])
    again = FakeStream()
    engine.sessions.attach(s, again, last_seq=1)
    assert again.seqs == [2, 3, 4]
    engine.apply_changes([delete(2)])
    assert again.seqs == [2, 3, 4, 5]


def test_last_seq_older_than_the_replay_buffer_gets_a_reset_per_view():
    engine, clock, s = setup()
    out = FakeStream()
    engine.sessions.attach(s, out)
    for i in range(1, 12):                      # more than max_queue (5) written
        engine.apply_changes([upsert(stream(i, i))])
    engine.sessions.detach(s, out)
    again = FakeStream()
    engine.sessions.attach(s, again, last_seq=1)
    assert [e["action"] for e in again.events] == ["reset"]
    assert [o["id"] for o in again.events[0]["obj"]] == [11, 10, 9]
    assert again.seqs[0] > out.seqs[-1]


def test_last_seq_ahead_of_the_session_is_refused():
    engine, clock, s = setup()
    with pytest.raises(ValueError, match="ahead"):
        engine.sessions.attach(s, FakeStream(), last_seq=1)


def test_a_new_delivery_replaces_the_old():
    engine, clock, s = setup()
    poll = get_events(engine.sessions, s, 30, None)
    out = FakeStream()
    engine.sessions.attach(s, out)
    assert fired(poll) == b"[]"                 # the parked poll is answered []
    second = FakeStream()
    engine.sessions.attach(s, second)
    assert out.closed and not second.closed     # a replaced stream is closed
    assert engine.sessions.streams == 1
    get_events(engine.sessions, s, 0, None)      # a poll replaces a stream too
    assert second.closed and engine.sessions.streams == 0


def test_a_stream_keeps_the_session_alive_and_expiry_counts_from_detach():
    engine, clock, s = setup()
    out = FakeStream()
    engine.sessions.attach(s, out)
    clock.advance(3600)
    assert s.id in engine.sessions.sessions
    engine.sessions.detach(s, out)
    clock.advance(59)
    assert s.id in engine.sessions.sessions
    clock.advance(2)
    assert s.id not in engine.sessions.sessions


def test_a_stream_that_does_not_read_is_not_written_and_overflows_into_a_reset():
    engine, clock, s = setup()
    out = FakeStream()
    engine.sessions.attach(s, out)
    engine.apply_changes([upsert(stream(1, 1))])
    out.full = True                             # the client stopped reading
    for i in range(2, 12):
        engine.apply_changes([upsert(stream(i, i))])
    assert out.seqs == [1]
    assert s.log.size <= 5                      # the log never grows past max_queue
    out.full = False
    engine.sessions.resume_writing(s, out)      # the socket drained
    after = out.events[1:]
    assert after[0]["action"] == "reset"        # then what came after the overflow
    state = {o["id"]: o for o in after[0]["obj"]}
    for e in after[1:]:
        if e["action"] == "delete":
            del state[e["obj"]["id"]]
        else:
            state[e["obj"]["id"]] = e["obj"]
    assert sorted(state) == [9, 10, 11]
    assert engine.sessions.overflows >= 1


def test_destroy_closes_the_stream():
    engine, clock, s = setup()
    out = FakeStream()
    engine.sessions.attach(s, out)
    engine.sessions.destroy(s)
    assert out.closed and engine.sessions.streams == 0


def test_a_poll_after_a_stream_acks_as_before():
    engine, clock, s = setup()
    out = FakeStream()
    engine.sessions.attach(s, out)
    engine.apply_changes([upsert(stream(1, 1)), upsert(stream(2, 2))])
    engine.sessions.detach(s, out)
    events = json.loads(get_events(engine.sessions, s, 0, 1))
    assert [e["seq"] for e in events] == [2]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(
    st.tuples(st.just("change"), st.integers(0, 6), st.integers(0, 9), st.booleans()),
    st.tuples(st.just("drop"), st.integers(0, 3)),     # connection lost after k more events
    st.tuples(st.just("full"), st.booleans()),
), max_size=40))
def test_a_client_that_reconnects_always_ends_with_the_true_state(ops):
    """Whatever drops and stalls happen, a client applying what it receives
    (and resuming with the last seq it got) ends with the view's true state."""
    engine, clock, s = setup()
    view = engine.catalog.views["Live"].bind({}, None, 3)
    key = view.key
    objects: dict = {}
    state: dict = {}
    last = 0
    out = FakeStream()
    engine.sessions.attach(s, out, last_seq=0)

    def receive(events):
        nonlocal last, state
        for e in events:
            assert e["seq"] == last + 1 or e["action"] == "reset", (e["seq"], last)
            last = e["seq"]
            if e["action"] == "reset":
                state = {o["id"]: o for o in e["obj"]}
            elif e["action"] in ("insert", "update"):
                state[e["obj"]["id"]] = e["obj"]
            elif e["action"] == "delete":
                state.pop(e["obj"]["id"], None)

    for op in ops:
        if op[0] == "change":
            _, id_, n, live = op
            obj = stream(id_, n, live=live)
            objects[id_] = obj
            engine.apply_changes([upsert(obj)])
        elif op[0] == "full":
            out.full = op[1]
            if not out.full:
                engine.sessions.resume_writing(s, out)
        else:
            keep = op[1]
            receive(out.events[:keep])          # the rest was lost with the connection
            engine.sessions.detach(s, out)
            out = FakeStream()
            engine.sessions.attach(s, out, last_seq=last)
        receive_now = out.events
        out.events = []
        receive(receive_now)
    out.full = False
    engine.sessions.resume_writing(s, out)
    receive(out.events)
    truth = sorted((o for o in objects.values() if o["live"]),
                   key=lambda o: (o["n"], o["id"]), reverse=True)[:3]
    assert sorted(state) == sorted(o["id"] for o in truth), key


def test_attaching_the_same_stream_again_replays_without_closing_it():
    engine, clock, s = setup()
    out = FakeStream()
    engine.sessions.attach(s, out)
    engine.apply_changes([upsert(stream(1, 1)), upsert(stream(2, 2))])
    engine.sessions.attach(s, out, last_seq=1)
    assert not out.closed and engine.sessions.streams == 1
    assert out.seqs == [1, 2, 2]
