"""The channels recipe (docs/recipes/channels.yaml) on a real node: what a
channel's subscribers receive, its history, limit, deletes, private channels."""
from __future__ import annotations

import re
from pathlib import Path

import jwt
import pytest

from pushengine.client import SyncClient
from tests.e2e.conftest import start

pytestmark = [pytest.mark.e2e]

ROOT = Path(__file__).resolve().parents[2]
RECIPE = ROOT / "docs" / "recipes" / "channels.yaml"
SECRET = "channels-recipe-secret-0123456789abcdef"


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    e = start(tmp_path_factory.mktemp("channels"), "--views", str(RECIPE), "--secret", SECRET,
              "--max-timeout", "5")
    yield e
    e.stop()


@pytest.fixture
def client(node):
    with SyncClient(node.base) as c:
        yield c


def message(channel: str, n: int, **fields) -> dict:
    return {"id": f"{channel}-{n}", "channel": channel, "author": "anna", "text": f"#{n}",
            "sent_at": 1767225600000 + n, "public": True, **fields}


def events(c: SyncClient, sid: str) -> list[tuple[str, str]]:
    return [(e["action"], e["obj"]["id"]) for e in c.rpc("session.get_events", [sid, 0])]


def test_the_docs_show_the_recipe_as_the_file_holds_it():
    text = (ROOT / "docs" / "coming-from.md").read_text("utf-8")
    blocks = re.findall(r"```yaml\n(.*?)```", text, re.S)
    assert RECIPE.read_text("utf-8") in blocks


def test_a_channel_gets_its_messages_newest_first_and_no_other_channels(client):
    general, other = client.rpc("session.create"), client.rpc("session.create")
    key, state = client.rpc("channel.subscribe", [general, "general", 3])
    assert (key, state) == ('ChannelView(channel="general";limit=3)', [])
    client.rpc("channel.subscribe", [other, "random", 3])
    client.upsert_many("Message", [message("general", n) for n in (1, 2, 3)])
    client.upsert("Message", message("random", 1))
    assert events(client, general) == [("insert", "general-1"), ("insert", "general-2"),
                                       ("insert", "general-3")]
    assert events(client, other) == [("insert", "random-1")]

    # a full window: the oldest leaves before the newest enters
    client.upsert("Message", message("general", 4))
    assert events(client, general) == [("delete", "general-1"), ("insert", "general-4")]
    # history: a new subscriber gets the newest `limit`, newest first
    late = client.rpc("session.create")
    _, history = client.rpc("channel.subscribe", [late, "general", 3])
    assert [m["id"] for m in history] == ["general-4", "general-3", "general-2"]
    # an edit is an update; a delete takes it out and the next older comes back
    client.upsert("Message", message("general", 3, text="edited"))
    client.delete("Message", "general-4")
    assert events(client, general) == [("update", "general-3"), ("delete", "general-4"),
                                       ("insert", "general-1")]
    assert events(client, other) == []


def test_a_private_message_reaches_only_the_members(client):
    member, stranger = client.rpc("session.create"), client.rpc("session.create")
    token = jwt.encode({"sub": "77"}, SECRET, algorithm="HS256")
    assert client.rpc("session.authorize", [member, token]) == 77
    client.rpc("channel.subscribe_private", [member, "staff", 10])
    client.rpc("channel.subscribe", [stranger, "staff", 10])
    client.upsert("Message", message("staff", 1, public=False, allowed_users=[77]))
    client.upsert("Message", message("staff", 2))
    assert [e for e in events(client, member) if e[0] != "join"] == [
        ("insert", "staff-1"), ("insert", "staff-2")]
    assert events(client, stranger) == [("insert", "staff-2")]
