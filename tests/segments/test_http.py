"""/api/segments and targeting, on a node driven in memory (SPEC section 15)."""
from __future__ import annotations

import hashlib

import jwt
import pytest

from tests.http.harness import ClockNode, Http, Rpc

SECRET = "segment-test-secret-of-enough-length"
VIEWS = """
types: {Offer: {id: id}}
views:
  OfferView:
    type: Offer
    method: offer.subscribe
    where: {audience: $session.segments}
    order: id
    limit: {default: 50, max: 50}
  VipView:
    type: Offer
    method: offer.subscribe_vip
    where: {in_segment: vip}
    order: id
    limit: {default: 50, max: 50}
  PlainView:
    type: Offer
    method: offer.subscribe_plain
    order: id
    limit: {default: 50, max: 50}
"""


def contacts(n: int, start: int = 0) -> list[str]:
    return [f"7999{start + i:07d}" for i in range(n)]


def csv_of(phones: list[str], emails: list[str] = ()) -> bytes:
    rows = ["phone,email"] + [f"{p}," for p in phones] + [f",{e}" for e in emails]
    return ("\n".join(rows) + "\n").encode()


@pytest.fixture
def node(tmp_path):
    views = tmp_path / "views.yaml"
    views.write_text(VIEWS)
    return ClockNode("--views", str(views), "--secret", SECRET, "--segment-min", "3")


@pytest.fixture
def http(node):
    return Http(node.web.resource())


@pytest.fixture
def rpc(http):
    return Rpc(http)


def post(http, name, data, headers=None, query=""):
    return http.request("POST", f"/api/segments/{name}{query}", data, headers)


def test_upload_list_delete(http):
    reply = post(http, "vip", csv_of(contacts(5) + contacts(1), ["A@b.ru"]))
    assert reply.code == 200, reply
    body = reply.json()
    assert (body["valid"], body["duplicates"], body["invalid"], body["name"]) == (6, 1, 0, "vip")
    listed = http.get("/api/segments").json()["segments"]
    assert [(s["name"], s["valid"]) for s in listed] == [("vip", 6)]
    assert http.request("DELETE", "/api/segments/vip").json() == {"deleted": True,
                                                                    "name": "vip"}
    assert http.get("/api/segments").json() == {"segments": []}
    assert http.request("DELETE", "/api/segments/vip").code == 404


def test_errors_are_json_with_code_and_line_and_change_nothing(http, node):
    assert post(http, "vip", csv_of(contacts(5))).code == 200
    before = dict(node.segments.sets)
    for data, code in [(b"phone;email\n1;2\n", "header_validation"),
                       (csv_of(contacts(2)), "too_few_unique"),
                       ("email\nx@y.ru\n".encode("cp1251") + b"\x98\n", "encoding"),
                       # SPEC 18: a line past 64 KiB, a NUL byte
                       (b"phone\n" + b"7" * (3 << 20), "format"),
                       (csv_of(contacts(5)) + b"7999\x005551111\n", "format")]:
        reply = post(http, "vip", data)
        assert reply.code == 400, reply
        error = reply.json()["error"]
        assert error["code"] == code and "line" in error
    assert node.segments.sets == before
    assert http.get("/api/segments").json()["segments"][0]["valid"] == 5


def test_a_good_upload_replaces_the_segment(http, node):
    post(http, "vip", csv_of(contacts(5)))
    post(http, "vip", csv_of(contacts(3, start=100)))
    assert node.segments.sets["vip"] == set(
        hashlib.sha256(p.encode()).digest() for p in contacts(3, start=100))


def test_who_may_upload(tmp_path):
    views = tmp_path / "v.yaml"
    views.write_text(VIEWS)
    keyed = Http(ClockNode("--views", str(views), "--publish-key", "k3y",
                           "--segment-min", "1").web.resource())
    assert post(keyed, "a", csv_of(contacts(1))).code == 401
    assert post(keyed, "a", csv_of(contacts(1)), {"authorization": "Bearer nope"}).code == 401
    assert post(keyed, "a", csv_of(contacts(1)), {"authorization": "Bearer k3y"}).code == 200
    assert keyed.get("/api/segments").code == 401
    open_ = Http(ClockNode("--views", str(views), "--segment-min", "1").web.resource())
    assert post(open_, "a", csv_of(contacts(1)), {"origin": "http://evil.example"}).code == 403


def test_bad_names_and_methods(http):
    assert post(http, "no/slash", csv_of(contacts(5))).code in (400, 404)
    assert post(http, "-x", csv_of(contacts(5))).code == 400
    assert post(http, "vip", csv_of(contacts(5)), query="?hashed=sha1").code == 400
    assert http.request("PUT", "/api/segments/vip", b"").code == 405
    assert http.request("POST", "/api/segments", b"").code == 405


def session(rpc, **claims):
    sid = rpc("session.create")
    if claims is not None:
        rpc("session.authorize", sid, jwt.encode({"sub": claims.pop("sub", "1"), **claims},
                                                 SECRET, algorithm="HS256"))
    return sid


def publish(node, *objs):
    from pushengine.core.changes import Change
    node.feed.publish([Change("Offer", "upsert", o) for o in objs]) \
        if hasattr(node.feed, "publish") else None


def test_a_targeted_object_reaches_exactly_the_segments_sessions(http, rpc, node):
    members = contacts(4)
    post(http, "vip", csv_of(members[:2], ["club@example.ru"]))
    post(http, "other", csv_of(contacts(3, start=500)))
    inside = [session(rpc, sub="1", phone="+7 (999) 000-00-00"),
              session(rpc, sub="2", email=" Club@Example.RU"),
              session(rpc, sub="3", phone=members[1], email="nobody@x.ru")]
    outside = [session(rpc, sub="4", phone=members[3]), session(rpc, sub="5"),
               rpc("session.create")]
    for sid in inside + outside:
        key, state = rpc("session.subscribe", sid, "OfferView", {}, 50)
        assert state == []
    reply = http.post("/api/publish", [
        {"type": "Offer", "action": "upsert", "obj": {"id": 1, "public": True,
                                                      "audience": "vip"}},
        {"type": "Offer", "action": "upsert", "obj": {"id": 2, "public": True}},
        {"type": "Offer", "action": "upsert", "obj": {"id": 3, "public": True,
                                                      "audience": "other"}},
        {"type": "Offer", "action": "upsert", "obj": {"id": 4, "public": True,
                                                      "audience": 5}}])
    assert reply.code == 200, reply
    for sid in inside:
        events = rpc("session.get_events", sid, 0)
        assert sorted(e["obj"]["id"] for e in events if e["action"] == "insert") == [1, 2]
    for sid in outside:
        events = rpc("session.get_events", sid, 0)
        assert sorted(e["obj"]["id"] for e in events if e["action"] == "insert") == [2]
    # a new subscription's initial state holds the same
    late_in = session(rpc, sub="6", phone=members[0])
    assert [o["id"] for o in rpc("session.subscribe", late_in, "OfferView", {}, 50)[1]] == [1, 2]
    late_out = session(rpc, sub="7")
    assert [o["id"] for o in rpc("session.subscribe", late_out, "OfferView", {}, 50)[1]] == [2]
    # a view without the audience condition never shows a targeted object
    assert [o["id"] for o in rpc("session.subscribe", late_in, "PlainView", {}, 50)[1]] == [2]


def test_in_segment_limits_a_view_to_the_segments_sessions(http, rpc):
    post(http, "vip", csv_of(contacts(3)))
    http.post("/api/publish", [{"type": "Offer", "action": "upsert",
                                "obj": {"id": 9, "public": True}}])
    member = session(rpc, sub="1", phone=contacts(1)[0])
    stranger = session(rpc, sub="2", phone=contacts(1, start=900)[0])
    assert [o["id"] for o in rpc("session.subscribe", member, "VipView", {}, 50)[1]] == [9]
    assert rpc("session.subscribe", stranger, "VipView", {}, 50)[1] == []
    # the client cannot claim segments itself
    assert rpc.error("session.subscribe", stranger, "VipView",
                     {"session.segments": ["vip"]}, 50).code == -32602


def test_only_digests_of_the_claims_are_kept(rpc, node):
    sid = session(rpc, sub="1", phone="+7 (999) 555-11-11", email="a@b.ru")
    s = node.engine.sessions.get(sid)
    assert not hasattr(s, "segment_hashes")       # the segments package keeps them
    digests = node.contacts.of(s)
    assert len(digests) == 4
    assert all(isinstance(h, bytes) and b"7999" not in h for h in digests)
