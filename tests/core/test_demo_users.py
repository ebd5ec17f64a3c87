"""--demo publishes users too, and renames one now and then (SPEC section 11)."""
from __future__ import annotations

from urllib.parse import unquote

from twisted.internet.task import Clock

from pushengine.tools.demo import USERS, DemoProducer
from tests.http.harness import ClockNode, Http, Rpc


def test_the_first_step_publishes_every_user_with_a_name_and_an_avatar() -> None:
    producer = DemoProducer(Clock(), None, seed=3)
    changes = producer.step()
    assert {c.type for c in changes} == {"User"}
    assert {c.id for c in changes} == set(USERS)
    for c in changes:
        assert c.obj["id"] == c.id and " " in c.obj["name"]
        assert c.obj["avatar"].startswith("data:image/svg+xml,")
        assert len(c.obj["avatar"]) < 1000
        initials = "".join(p[0] for p in c.obj["name"].split()).upper()
        assert f">{initials}</text>" in unquote(c.obj["avatar"])


def test_users_are_renamed_now_and_then_and_streams_are_theirs() -> None:
    producer = DemoProducer(Clock(), None, seed=4)
    first = {c.id: c.obj for c in producer.step()}
    renames, streams = [], []
    for _ in range(3000):
        for c in producer.step():
            (renames if c.type == "User" else streams).append(c)
    assert 30 < len(renames) < 200, len(renames)
    for c in renames:
        assert c.obj["name"].split()[0] == first[c.id]["name"].split()[0]  # same first name
        initials = "".join(p[0] for p in c.obj["name"].split()).upper()
        assert f">{initials}</text>" in unquote(c.obj["avatar"])  # the avatar follows the name
    assert {c.obj["user_id"] for c in streams if c.action == "upsert"} <= set(USERS)


def test_a_demo_node_answers_profiles() -> None:
    node = ClockNode()
    producer = DemoProducer(node.clock, node.feed, seed=5)
    producer.tick()
    rpc = Rpc(Http(node.web.resource()))
    profile = rpc("user.public_profile", 340690)
    assert set(profile) == {"id", "name", "avatar"}  # not its login nor created_at
    assert rpc("user.public_profiles", list(USERS))[-1]["id"] == max(USERS)
