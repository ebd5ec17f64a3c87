"""Sessions on a Clock: long-polls, ack, overflow, pings, expiry, limits."""
from __future__ import annotations

import json

import pytest
from twisted.internet.defer import CancelledError
from twisted.trial.unittest import SynchronousTestCase

from pushengine.core.errors import LimitReached, NotAuthorized, UnknownKey, UnknownSession
from pushengine.transports.longpoll import LongPolling
from tests.core.helpers import delete, get_events, make_engine, upsert

VIEWS = {"Live": {"type": "Stream", "params": ["limit"], "where": {"live": True},
                  "order": "-n", "limit": {"default": 2, "max": 5}},
         "ByUser": {"type": "Stream", "params": ["user_id"], "where": {"user_id": "$user_id"},
                    "order": "n"}}


def stream(id_, n=0, live=True, **kw):
    return {"id": id_, "n": n, "live": live, "public": True, **kw}


class SessionTests(SynchronousTestCase):
    def setUp(self):
        self.engine, self.clock = make_engine(VIEWS, session_timeout=120, max_timeout=90,
                                              max_queue=5, max_subscriptions=2)
        self.sessions = self.engine.sessions
        self.poller = LongPolling(self.sessions, self.clock)

    def subscribe(self, session, view="Live", params=None, limit=None):
        bound = self.engine.catalog.views[view].bind(params or {}, session.user, limit)
        return self.successResultOf(self.sessions.subscribe(session, bound))

    def poll(self, session, timeout=30, ack=None):
        return self.poller.get_events(session, timeout, ack)

    def test_poll_parks_until_an_event_arrives(self):
        s = self.sessions.create()
        key, state = self.subscribe(s)
        d = self.poll(s)
        self.assertNoResult(d)
        self.assertEqual(self.sessions.waiting, 1)
        self.engine.apply_changes([upsert(stream(1))])
        events = json.loads(self.successResultOf(d))
        self.assertEqual([(e["seq"], e["action"], e["obj"]["id"]) for e in events],
                         [(1, "insert", 1)])
        self.assertEqual(self.sessions.waiting, 0)

    def test_poll_times_out_with_empty_list_capped_by_max_timeout(self):
        s = self.sessions.create()
        d = self.poll(s, timeout=10_000)
        self.clock.advance(89.9)
        self.assertNoResult(d)
        self.clock.advance(0.2)
        self.assertEqual(self.successResultOf(d), b"[]")

    def test_zero_timeout_answers_at_once(self):
        s = self.sessions.create()
        self.assertEqual(self.poll(s, timeout=0), b"[]")

    def test_second_poll_answers_the_first_with_empty_list(self):
        s = self.sessions.create()
        self.subscribe(s)
        first = self.poll(s)
        second = self.poll(s)
        self.assertEqual(self.successResultOf(first), b"[]")
        self.assertNoResult(second)
        self.engine.apply_changes([upsert(stream(1))])
        self.assertEqual(len(json.loads(self.successResultOf(second))), 1)

    def test_ack_redelivers_unacknowledged_events(self):
        s = self.sessions.create()
        self.subscribe(s)
        self.engine.apply_changes([upsert(stream(1, n=1)), upsert(stream(2, n=2))])
        first = json.loads(self.poll(s, ack=0))
        self.assertEqual([e["seq"] for e in first], [1, 2])
        # the answer was lost: the same ack brings the same events again
        again = json.loads(self.poll(s, ack=0))
        self.assertEqual(again, first)
        self.engine.apply_changes([upsert(stream(3, n=3))])
        later = json.loads(self.poll(s, ack=1))
        self.assertEqual([e["seq"] for e in later], [2, 3, 4])
        d = self.poll(s, ack=4)
        self.assertNoResult(d)

    def test_without_ack_delivered_events_are_dropped(self):
        s = self.sessions.create()
        self.subscribe(s)
        self.engine.apply_changes([upsert(stream(1))])
        self.assertEqual(len(json.loads(self.poll(s))), 1)
        self.assertEqual(self.poll(s, timeout=0), b"[]")

    def test_overflow_replaces_the_queue_with_a_reset(self):
        s = self.sessions.create()
        key, _ = self.subscribe(s, limit=2)
        self.engine.apply_changes([upsert(stream(i, n=i)) for i in range(1, 10)])
        events = json.loads(self.poll(s, timeout=0))
        self.assertLessEqual(len(events), 5)
        resets = [e for e in events if e["action"] == "reset"]
        self.assertEqual(len(resets), 1)
        # replaying from the reset gives the true state
        after = events[events.index(resets[0]):]
        state = {o["id"]: o for o in after[0]["obj"]}
        for e in after[1:]:
            if e["action"] == "insert":
                state[e["obj"]["id"]] = e["obj"]
            elif e["action"] == "delete":
                del state[e["obj"]["id"]]
        self.assertEqual(sorted(state), [8, 9])
        self.assertEqual(self.sessions.overflows >= 1, True)
        seqs = [e["seq"] for e in events]
        self.assertEqual(seqs, sorted(seqs))

    def test_ping_only_for_quiet_views(self):
        s = self.sessions.create()
        key, _ = self.subscribe(s)
        self.engine.apply_changes([upsert(stream(1))])
        self.poll(s, timeout=0)
        self.engine.ping()   # the view spoke since the last ping: no ping
        self.assertEqual(self.poll(s, timeout=0), b"[]")
        d = self.poll(s)
        self.engine.ping()
        self.assertEqual([e["action"] for e in json.loads(self.successResultOf(d))], ["ping"])

    def test_session_expires_when_not_polled(self):
        s = self.sessions.create()
        self.subscribe(s)
        self.clock.advance(119)
        self.sessions.get(s.id)
        self.clock.advance(2)
        self.assertRaises(UnknownSession, self.sessions.get, s.id)
        self.assertEqual(self.engine.registry.queries, {})

    def test_a_parked_poll_keeps_the_session_alive(self):
        s = self.sessions.create()
        self.clock.advance(100)
        d = self.poll(s, timeout=90)
        self.clock.advance(90)
        self.successResultOf(d)
        self.clock.advance(119)
        self.assertIs(self.sessions.get(s.id), s)
        self.clock.advance(2)
        self.assertRaises(UnknownSession, self.sessions.get, s.id)

    def test_cancelled_poll_frees_its_waiter(self):
        s = self.sessions.create()
        d = self.poll(s)
        d.cancel()
        self.failureResultOf(d, CancelledError)
        self.assertIsNone(s.delivery)
        self.assertEqual(self.sessions.waiting, 0)
        self.assertEqual(self.clock.getDelayedCalls()[0].getTime(), 120)
        self.clock.advance(121)
        self.assertRaises(UnknownSession, self.sessions.get, s.id)

    def test_destroy_answers_the_parked_poll_and_frees_views(self):
        s = self.sessions.create()
        self.subscribe(s)
        d = self.poll(s)
        self.sessions.destroy(s)
        self.assertEqual(self.successResultOf(d), b"[]")
        self.assertEqual(self.engine.registry.queries, {})
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_limits(self):
        s = self.sessions.create()
        self.subscribe(s, limit=1)
        self.subscribe(s, limit=2)
        self.assertRaises(LimitReached, self.subscribe, s, limit=3)
        # subscribing again to a held key is not a new subscription
        self.subscribe(s, limit=2)

    def test_max_sessions(self):
        engine, _ = make_engine(VIEWS, max_sessions=2)
        engine.sessions.create()
        engine.sessions.create()
        self.assertRaises(LimitReached, engine.sessions.create)

    def test_unsubscribe_drops_queued_events_and_frees_the_view(self):
        s = self.sessions.create()
        key, _ = self.subscribe(s)
        self.engine.apply_changes([upsert(stream(1))])
        self.sessions.unsubscribe(s, key)
        self.assertEqual(self.poll(s, timeout=0), b"[]")
        self.assertEqual(self.engine.registry.queries, {})
        self.assertRaises(UnknownKey, self.sessions.unsubscribe, s, key)

    def test_shared_window_one_key(self):
        a, b = self.sessions.create(), self.sessions.create()
        ka, _ = self.subscribe(a, "ByUser", {"user_id": 7})
        kb, _ = self.subscribe(b, "ByUser", {"user_id": 7})
        self.assertEqual(ka, kb)
        self.assertEqual(ka, "ByUser(user_id=7;limit=10)")
        self.assertEqual(len(self.engine.registry.queries), 1)
        self.engine.apply_changes([upsert(stream(1, user_id=7))])
        self.assertEqual(json.loads(self.poll(a, timeout=0)),
                         json.loads(self.poll(b, timeout=0)))

    def test_resubscribe_drops_queued_events_of_that_key(self):
        s = self.sessions.create()
        self.subscribe(s)
        self.engine.apply_changes([upsert(stream(1))])
        key, state = self.subscribe(s)
        self.assertEqual([o["id"] for o in state], [1])
        self.assertEqual(self.poll(s, timeout=0), b"[]")

    def test_delete_refills_a_full_window(self):
        s = self.sessions.create()
        self.engine.apply_changes([upsert(stream(i, n=i)) for i in range(1, 4)])
        key, state = self.subscribe(s, limit=2)
        self.assertEqual([o["id"] for o in state], [3, 2])
        self.engine.apply_changes([delete(3)])
        events = json.loads(self.poll(s, timeout=0))
        self.assertEqual([(e["action"], e["obj"]["id"]) for e in events],
                         [("delete", 3), ("insert", 1)])

    def test_identical_upsert_emits_nothing(self):
        s = self.sessions.create()
        self.subscribe(s)
        self.engine.apply_changes([upsert(stream(1))])
        self.poll(s, timeout=0)
        self.engine.apply_changes([upsert(stream(1))])
        self.assertEqual(self.poll(s, timeout=0), b"[]")


@pytest.mark.parametrize("n", [1, 3])
def test_reset_session_queues_one_reset_per_view(n):
    engine, clock = make_engine(VIEWS)
    s = engine.sessions.create()
    for i in range(n):
        bound = engine.catalog.views["Live"].bind({}, None, i + 1)
        engine.sessions.subscribe(s, bound)
    engine.sessions.reset_session(s)
    events = json.loads(get_events(engine.sessions, s, 0, None))
    assert [e["action"] for e in events] == ["reset"] * n


# -- authorization ends at the token's exp ---------------------------------------------

HOME = {"Home": {"type": "Stream", "params": ["users"],
                 "where": {"user_id": {"in": "$users"}, "visible_to": "$session.user"},
                 "order": "id"},
        "Public": {"type": "Stream", "where": {"public": True}, "order": "id"}}


def _home_session(expires_at):
    from pushengine.core.hooks import Hooks, SessionHooksBase
    heard = []

    class Ear(SessionHooksBase):
        def deauthorized(self, session):
            heard.append("deauthorized")

        def changed(self, session):
            heard.append("changed")
    engine, clock = make_engine(HOME, hooks=Hooks([Ear()]))
    engine.apply_changes([upsert({"id": 1, "user_id": 5, "public": False,
                                  "allowed_users": [7]}), upsert({"id": 2, "public": True})])
    sessions = engine.sessions
    s = sessions.create()
    sessions.authorize(s, 7, expires_at)
    home = engine.catalog.views["Home"].bind({"users": [5]}, 7, None)
    key = sessions.subscribe(s, home).result[0]
    public = sessions.subscribe(s, engine.catalog.views["Public"].bind({}, None, None)).result[0]
    return engine, clock, s, key, public, heard


def test_authorization_ends_at_expires_at_with_deletes():
    engine, clock, s, key, public, heard = _home_session(30.0)
    clock.advance(29)
    assert s.user == 7 and json.loads(get_events(engine.sessions, s)) == []
    clock.advance(1)
    assert s.user is None and key not in s.subs and key not in s.bounds and public in s.subs
    got = json.loads(get_events(engine.sessions, s))
    assert [(e["key"], e["action"], e["obj"]["id"]) for e in got] == [(key, "delete", 1)]
    assert heard == ["deauthorized", "changed"]
    # the window closed with its last subscriber
    assert not any(w.key == key for w in engine.registry.windows())


def test_events_queued_before_the_expiry_stay_before_the_deletes():
    engine, clock, s, key, _, _ = _home_session(30.0)
    engine.apply_changes([upsert({"id": 3, "user_id": 5, "public": False,
                                  "allowed_users": [7]})])
    clock.advance(30)
    got = json.loads(get_events(engine.sessions, s))
    assert [(e["action"], e["obj"]["id"]) for e in got] == \
        [("insert", 3), ("delete", 1), ("delete", 3)]


def test_refresh_moves_the_expiry_and_destroy_cancels_it():
    engine, clock, s, key, _, heard = _home_session(30.0)
    engine.sessions.refresh(s, 7, 90.0)
    clock.advance(60)
    assert s.user == 7 and key in s.subs
    with pytest.raises(NotAuthorized):
        engine.sessions.refresh(s, 8, 500.0)
    clock.advance(30)
    assert s.user is None and heard == ["deauthorized", "changed"]
    with pytest.raises(NotAuthorized):
        engine.sessions.refresh(s, 7, 500.0)
    engine.sessions.authorize(s, 7, 200.0)
    engine.sessions.destroy(s)
    assert s.authorized_until is None
    assert all(c.func != engine.sessions._authorization_ended for c in clock.getDelayedCalls())


def test_authorize_without_expiry_never_ends():
    engine, clock, s, key, _, heard = _home_session(None)
    assert s.authorized_until is None
    engine.sessions.authorize(s, 7, 10.0)
    engine.sessions.authorize(s, 7, None)        # a token without exp: none
    clock.advance(100)
    assert s.user == 7 and heard == []


def test_the_hooks_hear_that_a_stream_ended_and_the_session_lives_on():
    from pushengine.core.hooks import Hooks, SessionHooksBase
    detached = []

    class Ear(SessionHooksBase):
        def detached(self, session):
            detached.append(session.id)

    class Stream:
        holds_session = True

        def notify(self, session):
            pass

        def close(self):
            pass
    engine, clock = make_engine(HOME, hooks=Hooks([Ear()]))
    sessions = engine.sessions
    s, t = sessions.create(), sessions.create()
    stream = Stream()
    sessions.attach(s, stream)
    sessions.detach(s, stream)                  # the client went away
    sessions.attach(s, Stream())
    sessions.attach(s, Stream())                # replaced by another stream
    assert detached == [s.id, s.id]
    get_events(sessions, t)                     # a poll is no stream
    sessions.destroy(s)                         # destroyed: ``destroyed`` says it
    assert detached == [s.id, s.id]
