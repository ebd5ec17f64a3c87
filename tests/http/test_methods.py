"""Every method of SPEC section 3 through the real resource, on simulated time."""
from __future__ import annotations

import json
import re
import time

import jwt
import pytest

from tests.http.harness import ClockNode, Http, Rpc

SECRET = "test-secret-of-enough-length-for-hs256"


def stream(id_: int, created: int, **fields) -> dict:
    obj = {"id": id_, "title": f"stream {id_}", "user_id": 1, "live": True, "public": True,
           "created_at": created}
    obj.update(fields)
    return obj


def publish(http: Http, *objs: dict, action: str = "upsert") -> None:
    changes = [{"type": "Stream", "action": action, "obj": o} for o in objs]
    reply = http.post("/api/publish", changes)
    assert reply.code == 200, reply
    assert reply.json() == {"accepted": len(changes)}


def token(sub: str = "42", secret: str = SECRET, **claims) -> str:
    return jwt.encode({"sub": sub, **claims}, secret, algorithm="HS256")


def events(rpc: Rpc, sid: str, ack: int | None = None) -> list[dict]:
    return rpc("session.get_events", sid, 0) if ack is None else \
        rpc("session.get_events", sid, 0, ack)


@pytest.fixture
def auth_node() -> ClockNode:
    return ClockNode("--secret", SECRET)


@pytest.fixture
def auth_rpc(auth_node: ClockNode) -> Rpc:
    return Rpc(Http(auth_node.web.resource()))


# -- sessions ------------------------------------------------------------------

def test_session_create_gives_long_random_ids(rpc: Rpc, node: ClockNode) -> None:
    ids = {rpc("session.create") for _ in range(50)}
    assert len(ids) == 50
    for sid in ids:
        assert re.fullmatch(r"[A-Za-z0-9_-]{22,}", sid)   # >= 128 bits in base64url
    assert set(node.engine.sessions.sessions) == ids


def test_session_destroy(rpc: Rpc, sid: str, node: ClockNode) -> None:
    rpc("stream.subscribe_public_live", sid)
    assert rpc("session.destroy", sid) is True
    assert node.engine.sessions.sessions == {}
    assert node.engine.registry.queries == {}          # its views are freed
    assert rpc.error("session.destroy", sid).code == 1001
    assert rpc.error("session.get_events", sid, 0).code == 1001


def test_unknown_session(rpc: Rpc) -> None:
    for sid in ("nope", "", 5, None, ["x"], {"a": 1}):
        assert rpc.error("session.get_events", sid, 0).code == 1001
        assert rpc.error("session.subscribe", sid, "PublicLiveStreamView", {}, 5).code == 1001
        assert rpc.error("stream.subscribe_public_live", sid).code == 1001
        assert rpc.error("session.unsubscribe", sid, "k").code == 1001
        assert rpc.error("session.destroy", sid).code == 1001


def test_session_expires_without_polls(rpc: Rpc, sid: str, node: ClockNode) -> None:
    node.clock.advance(119)
    assert rpc("session.get_events", sid, 0) == []     # a poll keeps it alive
    assert rpc("stats.online") == 1                    # and counts it online
    node.clock.advance(119)
    node.clock.advance(2)
    assert rpc.error("session.get_events", sid, 0).code == 1001
    assert node.engine.sessions.expired == 1


def test_max_sessions() -> None:
    node = ClockNode("--max-sessions", "2")
    rpc = Rpc(Http(node.web.resource()))
    first = rpc("session.create")
    rpc("session.create")
    assert rpc.error("session.create").code == 1004
    rpc("session.destroy", first)
    rpc("session.create")


# -- authorization ---------------------------------------------------------------

def test_authorize_returns_the_user(auth_rpc: Rpc) -> None:
    sid = auth_rpc("session.create")
    assert auth_rpc("session.authorize", sid, token("42")) == 42
    assert auth_rpc("session.authorize", sid, token("42")) == 42     # again: the same user
    other = auth_rpc("session.create")
    assert auth_rpc("session.authorize", other, token("alice")) == "alice"


@pytest.mark.parametrize("sub, user", [
    ("42", 42), ("0", 0), ("alice", "alice"),
    ("0042", "0042"), ("٤٢", "٤٢"), ("+42", "+42"), ("1" * 19, "1" * 19),
])
def test_only_canonical_decimal_subjects_are_integer_users(auth_rpc: Rpc, sub: str,
                                                           user) -> None:
    sid = auth_rpc("session.create")
    assert auth_rpc("session.authorize", sid, token(sub)) == user


def test_a_look_alike_subject_sees_nothing_private(auth_rpc: Rpc) -> None:
    publish(auth_rpc.http, stream(1, 10, user_id=42, public=False))
    sid = auth_rpc("session.create")
    auth_rpc("session.authorize", sid, token("0042"))
    assert auth_rpc("stream.subscribe_home", sid, [42])[1] == []


@pytest.mark.parametrize("bad", [
    token("42", exp=int(time.time()) - 60),                  # expired
    token("42", secret="another-secret-of-enough-length!!"),  # wrong signature
    token("42", nbf=int(time.time()) + 3600),                # not yet valid
    jwt.encode({"user": "42"}, SECRET, algorithm="HS256"),   # no subject
    jwt.encode({"sub": "42"}, None, algorithm="none"),       # unsigned
    jwt.encode({"sub": "42"}, SECRET * 2, algorithm="HS512"),  # another algorithm
    "not.a.token", "токен.x.y", "", 42, None, "x" * 8000,
])
def test_bad_tokens_are_not_authorized(auth_rpc: Rpc, auth_node: ClockNode, bad) -> None:
    sid = auth_rpc("session.create")
    assert auth_rpc.error("session.authorize", sid, bad).code == 1003
    assert auth_node.engine.sessions.sessions[sid].user is None


def test_authorize_as_another_user_is_refused(auth_rpc: Rpc) -> None:
    sid = auth_rpc("session.create")
    auth_rpc("session.authorize", sid, token("42"))
    assert auth_rpc.error("session.authorize", sid, token("43")).code == 1003


def test_authorize_without_a_secret_configured(rpc: Rpc, sid: str) -> None:
    assert rpc.error("session.authorize", sid, token("42")).code == 1003


def test_authorize_unknown_session(auth_rpc: Rpc) -> None:
    assert auth_rpc.error("session.authorize", "nope", token("42")).code == 1001


def test_home_view_needs_authorization(auth_rpc: Rpc) -> None:
    http = auth_rpc.http
    publish(http, stream(1, 10, user_id=42, public=False),
            stream(2, 20, user_id=7, public=False),
            stream(3, 30, user_id=7, public=False, allowed_users=[42]),
            stream(4, 40, user_id=7))
    sid = auth_rpc("session.create")
    assert auth_rpc.error("stream.subscribe_home", sid, [42, 7]).code == 1003
    assert auth_rpc.error("session.subscribe", sid, "HomeStreamView", {"users": [42]},
                          5).code == 1003
    auth_rpc("session.authorize", sid, token("42"))
    key, state = auth_rpc("stream.subscribe_home", sid, [42, 7])
    assert "42" in key and key.startswith("HomeStreamView(")
    assert [o["id"] for o in state] == [4, 3, 1]
    # access granted later: the object appears at once
    publish(http, stream(2, 20, user_id=7, public=False, allowed_users=[42]))
    evs = auth_rpc("session.get_events", sid, 0)
    assert [(e["action"], e["obj"]["id"]) for e in evs] == [("insert", 2)]
    # another user's session with the same params gets another key and never the private ones
    other = auth_rpc("session.create")
    auth_rpc("session.authorize", other, token("99"))
    other_key, other_state = auth_rpc("stream.subscribe_home", other, [42, 7])
    assert other_key != key
    assert [o["id"] for o in other_state] == [4]


def test_session_user_cannot_be_supplied(auth_rpc: Rpc) -> None:
    sid = auth_rpc("session.create")
    auth_rpc("session.authorize", sid, token("42"))
    for params in ({"users": [7], "session.user": 7}, {"users": [7], "$session.user": 7}):
        assert auth_rpc.error("session.subscribe", sid, "HomeStreamView", params,
                              5).code == -32602
    assert auth_rpc.error("session.subscribe", sid, "UserStreamView",
                          {"user_id": 1, "session.user": 7}, 5).code == -32602
    assert auth_rpc.error("stream.subscribe_home", sid, [7], 5, 7).code == -32602


# -- subscriptions ---------------------------------------------------------------

def test_subscribe_returns_key_and_state_in_view_order(rpc: Rpc, sid: str) -> None:
    publish(rpc.http, stream(1, 10), stream(2, 30), stream(3, 20), stream(4, 40, live=False),
            stream(5, 50, public=False))
    key, state = rpc("session.subscribe", sid, "PublicLiveStreamView", {}, 2)
    assert key == "PublicLiveStreamView(limit=2)"
    assert [o["id"] for o in state] == [2, 3]
    assert state[0] == stream(2, 30)
    key, state = rpc("session.subscribe", sid, "PublicLiveStreamView")
    assert key == "PublicLiveStreamView(limit=10)"          # the default limit
    assert [o["id"] for o in state] == [2, 3, 1]


def test_aliases(rpc: Rpc, sid: str) -> None:
    publish(rpc.http, stream(1, 10, user_id=340699), stream(2, 20, user_id=5),
            stream(3, 30, user_id=340699, live=False, title="Смешные кошки спят"),
            stream(4, 40, user_id=5, lat=55.75, lon=37.61))
    key, state = rpc("stream.subscribe_public_live", sid, 5)
    assert key == "PublicLiveStreamView(limit=5)" and [o["id"] for o in state] == [4, 2, 1]
    assert rpc("stream.subscribe_public_live", sid)[0] == "PublicLiveStreamView(limit=10)"
    key, state = rpc("stream.subscribe_public_recent", sid, 5)
    assert [o["id"] for o in state] == [3]
    key, state = rpc("stream.subscribe_user", sid, 340699)
    assert key == "UserStreamView(user_id=340699;limit=10)"
    assert [o["id"] for o in state] == [3, 1]
    key, state = rpc("stream.subscribe_word", sid, "кошкой", 3)     # an inflected form
    assert key.startswith("WordStreamView(") and [o["id"] for o in state] == [3]
    key, state = rpc("stream.subscribe_near", sid, 55.76, 37.62, 5)
    assert [o["id"] for o in state] == [4]
    # named parameters of an alias
    answer = rpc.http.post("/api/jsonrpc", {"jsonrpc": "2.0", "method": "stream.subscribe_user",
                                            "params": {"sid": sid, "user_id": 5, "limit": 1},
                                            "id": 1}).json()
    assert answer["result"] == ["UserStreamView(user_id=5;limit=1)", [stream(4, 40, user_id=5,
                                                                             lat=55.75,
                                                                             lon=37.61)]]


def test_word_view_follows_changes_in_inflected_forms(rpc: Rpc, sid: str) -> None:
    key, state = rpc("stream.subscribe_word", sid, "кошка")
    assert state == []
    publish(rpc.http, stream(1, 10, title="Играем с котом"), stream(2, 20, title="Две кошки"))
    assert [(e["action"], e["obj"]["id"]) for e in events(rpc, sid)] == [("insert", 2)]
    publish(rpc.http, stream(1, 10, title="Кошкам нравится"))
    assert [(e["action"], e["obj"]["id"]) for e in events(rpc, sid)] == [("insert", 1)]


def test_the_same_view_shares_one_key(rpc: Rpc, node: ClockNode) -> None:
    a, b = rpc("session.create"), rpc("session.create")
    ka, _ = rpc("stream.subscribe_user", a, 7, 5)
    kb, _ = rpc("session.subscribe", b, "UserStreamView", {"user_id": 7}, 5)
    assert ka == kb
    assert len(node.engine.registry.queries) == 1
    assert rpc("stats.online", ka) == 2


def test_unsubscribe(rpc: Rpc, sid: str, node: ClockNode) -> None:
    key, _ = rpc("stream.subscribe_public_live", sid)
    publish(rpc.http, stream(1, 10))
    assert rpc("session.unsubscribe", sid, key) is True
    assert events(rpc, sid) == []                # its queued events went with it
    publish(rpc.http, stream(2, 20))
    assert events(rpc, sid) == []
    assert node.engine.registry.queries == {}
    assert rpc.error("session.unsubscribe", sid, key).code == 1005
    assert rpc.error("session.unsubscribe", sid, "PublicLiveStreamView(limit=3)").code == 1005
    assert rpc.error("session.unsubscribe", sid, 5).code == 1005


def test_unknown_view(rpc: Rpc, sid: str) -> None:
    for view in ("NoSuchView", "", 5, None, ["PublicLiveStreamView"], "x" * 1000):
        assert rpc.error("session.subscribe", sid, view, {}, 5).code == 1002
    # a string longer than 1 KiB is refused before any method sees it
    assert rpc.error("session.subscribe", sid, "x" * 5000, {}, 5).code == -32602


@pytest.mark.parametrize("view, params, limit", [
    ("PublicLiveStreamView", {}, 0),
    ("PublicLiveStreamView", {}, -1),
    ("PublicLiveStreamView", {}, 51),                # above the view's max
    ("PublicLiveStreamView", {}, 10 ** 30),
    ("PublicLiveStreamView", {}, "10"),
    ("PublicLiveStreamView", {}, 2.5),
    ("PublicLiveStreamView", {}, True),
    ("PublicLiveStreamView", [], 5),
    ("PublicLiveStreamView", "x", 5),
    ("PublicLiveStreamView", {"nope": 1}, 5),
    ("UserStreamView", {}, 5),                        # missing parameter
    ("UserStreamView", {"user_id": {"a": 1}}, 5),
    ("UserStreamView", {"user_id": [1]}, 5),
    ("WordStreamView", {"word": "two words"}, 5),
    ("WordStreamView", {"word": 5}, 5),
    ("WordStreamView", {"word": "x" * 500}, 5),
    ("NearStreamView", {"lat": 91, "lon": 0, "km": 1}, 5),
    ("NearStreamView", {"lat": 0, "lon": "0", "km": 1}, 5),
    ("NearStreamView", {"lat": 0, "lon": 0, "km": -1}, 5),
])
def test_bad_subscribe_params(rpc: Rpc, sid: str, node: ClockNode, view, params, limit) -> None:
    assert rpc.error("session.subscribe", sid, view, params, limit).code == -32602
    assert node.engine.sessions.sessions[sid].subs == {}


def test_bad_alias_params(rpc: Rpc, sid: str) -> None:
    assert rpc.error("stream.subscribe_user", sid).code == -32602            # too few
    assert rpc.error("stream.subscribe_user", sid, 1, 5, 6).code == -32602   # too many
    assert rpc.error("stream.subscribe_public_live", sid, -5).code == -32602
    assert rpc.error("stream.subscribe_public_live", sid, 1000).code == -32602
    assert rpc.error("stream.subscribe_word", sid, "два слова").code == -32602


def test_max_subscriptions() -> None:
    node = ClockNode("--max-subscriptions", "2")
    rpc = Rpc(Http(node.web.resource()))
    sid = rpc("session.create")
    rpc("stream.subscribe_user", sid, 1)
    key, _ = rpc("stream.subscribe_user", sid, 2)
    assert rpc.error("stream.subscribe_user", sid, 3).code == 1004
    rpc("stream.subscribe_user", sid, 2)             # the same key again is no new one
    rpc("session.unsubscribe", sid, key)
    rpc("stream.subscribe_user", sid, 3)


# -- events and long-polls ---------------------------------------------------------

def test_insert_update_delete_events(rpc: Rpc, sid: str) -> None:
    key, _ = rpc("stream.subscribe_public_live", sid, 2)
    publish(rpc.http, stream(1, 10))
    publish(rpc.http, stream(1, 10, title="renamed"))
    publish(rpc.http, stream(1, 10, title="renamed"))        # changes nothing: no event
    publish(rpc.http, {"id": 1}, action="delete")
    evs = events(rpc, sid)
    assert evs == [
        {"seq": 1, "key": key, "action": "insert", "obj": stream(1, 10)},
        {"seq": 2, "key": key, "action": "update", "obj": stream(1, 10, title="renamed"),
         "old": stream(1, 10)},
        {"seq": 3, "key": key, "action": "delete", "obj": stream(1, 10, title="renamed")},
    ]


def test_full_view_pushes_out_and_lets_in(rpc: Rpc, sid: str) -> None:
    publish(rpc.http, stream(1, 10), stream(2, 20), stream(3, 30))
    key, state = rpc("stream.subscribe_public_live", sid, 2)
    assert [o["id"] for o in state] == [3, 2]
    publish(rpc.http, stream(4, 40))
    # the view never holds more than its limit: what leaves goes first
    assert [(e["action"], e["obj"]["id"]) for e in events(rpc, sid)] == [
        ("delete", 2), ("insert", 4)]
    publish(rpc.http, stream(4, 40, live=False))
    assert [(e["action"], e["obj"]["id"]) for e in events(rpc, sid)] == [
        ("delete", 4), ("insert", 2)]


def test_ack_redelivers_unacknowledged_events(rpc: Rpc, sid: str) -> None:
    rpc("stream.subscribe_public_live", sid)
    publish(rpc.http, stream(1, 10), stream(2, 20))
    first = rpc("session.get_events", sid, 0, 0)
    assert [e["seq"] for e in first] == [1, 2]
    again = rpc("session.get_events", sid, 0, 0)          # the answer was "lost"
    assert again == first
    publish(rpc.http, stream(3, 30))
    assert [e["seq"] for e in rpc("session.get_events", sid, 0, 1)] == [2, 3]
    assert rpc("session.get_events", sid, 0, 3) == []
    assert rpc.error("session.get_events", sid, 0, 4).code == -32602   # ahead of the last
    # without ack, delivered events are dropped
    publish(rpc.http, stream(4, 40))
    assert [e["seq"] for e in rpc("session.get_events", sid, 0)] == [4]
    assert rpc("session.get_events", sid, 0) == []


@pytest.mark.parametrize("timeout", [-1, -0.5, "5", None, True, [5], {"s": 5}, 1e400,
                                     10 ** 400])
def test_bad_timeouts(rpc: Rpc, sid: str, node: ClockNode, timeout) -> None:
    assert rpc.error("session.get_events", sid, timeout).code == -32602
    assert node.engine.sessions.waiting == 0


def test_nan_timeout(http: Http, rpc: Rpc, sid: str) -> None:
    body = '{"jsonrpc":"2.0","method":"session.get_events","params":["%s",NaN],"id":1}' % sid
    assert http.post("/api/jsonrpc", body).json()["error"]["code"] == -32602


@pytest.mark.parametrize("ack", [-1, "1", 1.5, True, [1], 10 ** 400])
def test_bad_acks(rpc: Rpc, sid: str, ack) -> None:
    assert rpc.error("session.get_events", sid, 0, ack).code == -32602


def test_poll_is_answered_by_a_publish(rpc: Rpc, sid: str, node: ClockNode) -> None:
    key, _ = rpc("stream.subscribe_public_live", sid)
    poll = rpc.send("session.get_events", sid, 30)
    assert not poll.done
    assert node.engine.sessions.waiting == 1
    node.clock.advance(10)
    assert not poll.done
    publish(rpc.http, stream(1, 10))
    assert poll.done
    assert rpc.unwrap(poll.json()) == [{"seq": 1, "key": key, "action": "insert",
                                        "obj": stream(1, 10)}]
    assert node.engine.sessions.waiting == 0


def test_poll_with_events_waiting_answers_at_once(rpc: Rpc, sid: str) -> None:
    rpc("stream.subscribe_public_live", sid)
    publish(rpc.http, stream(1, 10))
    poll = rpc.send("session.get_events", sid, 30)
    assert poll.done and len(rpc.unwrap(poll.json())) == 1


def test_poll_times_out_with_nothing(rpc: Rpc, sid: str, node: ClockNode) -> None:
    rpc("stream.subscribe_public_live", sid)
    poll = rpc.send("session.get_events", sid, 5)
    node.clock.advance(4.9)
    assert not poll.done
    node.clock.advance(0.2)
    assert poll.done and rpc.unwrap(poll.json()) == []
    assert node.engine.sessions.waiting == 0


def test_poll_timeout_is_capped_by_max_timeout(rpc: Rpc, sid: str, node: ClockNode) -> None:
    poll = rpc.send("session.get_events", sid, 3600)
    node.clock.advance(89.9)
    assert not poll.done
    node.clock.advance(0.2)
    assert poll.done and rpc.unwrap(poll.json()) == []
    small = ClockNode("--max-timeout", "2")
    small_rpc = Rpc(Http(small.web.resource()))
    s = small_rpc("session.create")
    poll = small_rpc.send("session.get_events", s, 10 ** 30)
    small.clock.advance(2.1)
    assert poll.done and small_rpc.unwrap(poll.json()) == []


def test_second_poll_answers_the_first_with_nothing(rpc: Rpc, sid: str, node: ClockNode) -> None:
    key, _ = rpc("stream.subscribe_public_live", sid)
    first = rpc.send("session.get_events", sid, 30)
    second = rpc.send("session.get_events", sid, 30)
    assert first.done and rpc.unwrap(first.json()) == []
    assert not second.done
    assert node.engine.sessions.waiting == 1
    publish(rpc.http, stream(1, 10))
    assert [e["seq"] for e in rpc.unwrap(second.json())] == [1]


def test_destroy_answers_a_parked_poll(rpc: Rpc, sid: str, node: ClockNode) -> None:
    poll = rpc.send("session.get_events", sid, 30)
    assert rpc("session.destroy", sid) is True
    assert poll.done and rpc.unwrap(poll.json()) == []
    assert node.engine.sessions.waiting == 0


def test_client_gone_mid_poll_frees_the_waiter(rpc: Rpc, sid: str, node: ClockNode) -> None:
    rpc("stream.subscribe_public_live", sid)
    poll = rpc.send("session.get_events", sid, 30)
    assert node.engine.sessions.waiting == 1
    poll.deferred.cancel()                 # the client closes its connection
    rpc.http.stub.flush()
    assert node.engine.sessions.waiting == 0
    assert node.engine.sessions.sessions[sid].delivery is None
    # the events go to the next poll, and the session expires if nobody polls
    publish(rpc.http, stream(1, 10))
    assert [e["seq"] for e in events(rpc, sid)] == [1]
    node.clock.advance(121)
    assert sid not in node.engine.sessions.sessions


def test_polling_session_does_not_expire(rpc: Rpc, sid: str, node: ClockNode) -> None:
    for _ in range(5):
        poll = rpc.send("session.get_events", sid, 90)
        node.clock.advance(90)
        assert poll.done and rpc.unwrap(poll.json()) == []
    assert sid in node.engine.sessions.sessions


def test_ping_events(rpc: Rpc, sid: str, node: ClockNode) -> None:
    key, _ = rpc("stream.subscribe_public_live", sid)
    poll = rpc.send("session.get_events", sid, 60)
    node.clock.advance(30)
    node.engine.ping()           # what the --ping-interval timer calls
    assert poll.done
    assert rpc.unwrap(poll.json()) == [{"seq": 1, "key": key, "action": "ping"}]


def test_queue_overflow_gives_a_reset() -> None:
    node = ClockNode("--max-queue", "3")
    http = Http(node.web.resource())
    rpc = Rpc(http)
    sid = rpc("session.create")
    key, _ = rpc("stream.subscribe_public_live", sid, 3)
    publish(http, *(stream(i, i) for i in range(1, 7)))
    evs = events(rpc, sid)
    assert len(evs) <= 4
    last_reset = max(i for i, e in enumerate(evs) if e["action"] == "reset")
    assert evs[last_reset]["key"] == key
    # the reset and the events after it rebuild the view's state
    ids = [o["id"] for o in evs[last_reset]["obj"]]
    for e in evs[last_reset + 1:]:
        if e["action"] == "delete":
            ids.remove(e["obj"]["id"])
        elif e["action"] == "insert":
            ids.append(e["obj"]["id"])
    assert sorted(ids, reverse=True) == [6, 5, 4]
    assert [e["seq"] for e in evs] == list(range(evs[0]["seq"], evs[0]["seq"] + len(evs)))


def test_events_are_json_lines_of_the_contract(rpc: Rpc, sid: str) -> None:
    rpc("stream.subscribe_word", sid, "кошка")
    publish(rpc.http, stream(1, 10, title="Кошки"))
    raw = rpc.http.post("/api/jsonrpc", rpc.body("session.get_events", [sid, 0])).body
    assert "Кошки".encode() in raw
    event, = json.loads(raw)["result"]
    assert set(event) == {"seq", "key", "action", "obj"}


# -- stats -------------------------------------------------------------------------

def test_stats_online(rpc: Rpc) -> None:
    assert rpc("stats.online") == 0
    a, b = rpc("session.create"), rpc("session.create")
    key, _ = rpc("stream.subscribe_public_live", a)
    assert rpc("stats.online") == 2
    assert rpc("stats.online", key) == 1
    assert rpc("stats.online", None) == 2
    assert rpc("stats.online", "NoSuchView(limit=1)") == 0
    assert rpc.error("stats.online", 5).code == -32602
    assert rpc.error("stats.online", ["k"]).code == -32602
