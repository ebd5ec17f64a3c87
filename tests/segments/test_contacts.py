"""Each session's contact digests, kept by the segments package
(pushengine.segments.contacts) from the token's claims at authorize."""
from __future__ import annotations

import gc

import jwt
from twisted.internet.defer import fail

from pushengine.core.hooks import Hooks
from pushengine.segments.contacts import SegmentMembership
from pushengine.segments.store import MemorySegments, SegmentsUnavailable
from pushengine.segments.targeting import contact_digests
from tests.core.helpers import make_engine
from tests.deferreds import fired
from tests.http.harness import ClockNode, Http, Rpc

VIEWS = {"Offers": {"type": "Offer", "where": {"audience": "$session.segments"},
                    "order": "id"}}
SECRET = "jwt-secret-of-at-least-thirty-two-bytes"
PHONE = "79990000001"


def store_with(name: str, phones: list[str]) -> MemorySegments:
    store = MemorySegments()
    upload = store.begin(name)
    upload.add([contact_digests({"phone": p})[0] for p in phones])
    fired(upload.commit({"valid": len(phones)}))
    return store


def test_authorized_keeps_the_digests_and_answers_the_segments():
    contacts = SegmentMembership(store_with("vip", [PHONE]))
    engine, clock = make_engine(VIEWS, hooks=Hooks([contacts]))
    s, other = engine.sessions.create(), engine.sessions.create()
    contacts.authorized(s, {"sub": "1", "phone": PHONE})
    contacts.authorized(other, {"sub": "2"})
    assert contacts.of(s) == contact_digests({"phone": PHONE}) and contacts.of(other) == ()
    assert fired(contacts.segments_of(s)) == ["vip"]
    assert fired(contacts.segments_of(other)) == []
    # authorized again with a token without contacts: none kept
    contacts.authorized(s, {"sub": "1"})
    assert contacts.of(s) == () and len(contacts) == 0


def test_the_digests_go_when_the_session_ends():
    contacts = SegmentMembership(MemorySegments())
    engine, clock = make_engine(VIEWS, hooks=Hooks([contacts]), session_timeout=10)
    destroyed, expiring = engine.sessions.create(), engine.sessions.create()
    for s in (destroyed, expiring):
        contacts.authorized(s, {"phone": PHONE})
    engine.sessions.destroy(destroyed)
    contacts.destroyed(destroyed)                  # the Api tells the hooks after destroy
    assert contacts.of(destroyed) == () and len(contacts) == 1
    clock.advance(11)                              # the manager tells them of expiry
    assert contacts.of(expiring) == () and len(contacts) == 0


def test_a_session_dropped_without_a_hook_leaves_nothing():
    contacts = SegmentMembership(MemorySegments())
    engine, clock = make_engine(VIEWS)
    s = engine.sessions.create()
    contacts.authorized(s, {"phone": PHONE})
    engine.sessions.destroy(s)
    del s
    gc.collect()
    assert len(contacts) == 0


def test_a_store_that_cannot_answer_fails_the_lookup():
    class Down(MemorySegments):
        def segments_of(self, digests):
            return fail(SegmentsUnavailable("down"))
    contacts = SegmentMembership(Down())
    engine, clock = make_engine(VIEWS)
    s = engine.sessions.create()
    contacts.authorized(s, {"phone": PHONE})
    f = contacts.segments_of(s)
    assert f.called and f.result.check(SegmentsUnavailable)
    f.addErrback(lambda _: None)


def test_session_authorize_fills_them_through_the_hooks():
    node = ClockNode("--secret", SECRET)
    rpc = Rpc(Http(node.web.resource()))
    sid = rpc("session.create")
    rpc("session.authorize", sid, jwt.encode({"sub": "1", "phone": PHONE}, SECRET,
                                             algorithm="HS256"))
    session = node.engine.sessions.get(sid)
    assert node.contacts in node.hooks and node.api.segments is node.contacts
    assert node.contacts.of(session) == contact_digests({"phone": PHONE})
    rpc("session.destroy", sid)
    assert node.contacts.of(session) == ()
