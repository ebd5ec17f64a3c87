"""Both flavours against a real ``twistd -n pushengine``: every call, a
segment upload with progress, a 429 from a node with a low --client-rate,
and the details of a refused publish."""
from __future__ import annotations

import time
from typing import Any

import jwt
import pytest
import pytest_twisted
from treq.client import HTTPClient
from twisted.internet import reactor, task
from twisted.internet.defer import Deferred
from twisted.web.client import Agent, HTTPConnectionPool

from pushengine.client import (
    BadInput, NO_RETRY, RateLimited, Rejected, RetryPolicy, SyncClient, Unauthorized)
from pushengine.client.tx import TwistedClient
from tests.e2e.conftest import start

pytestmark = [pytest.mark.e2e]

PUBLISH_KEY = "publish-key-e2e"
ADMIN_KEY = "admin-key-e2e-0123456789"
SECRET = "jwt-secret-of-the-client-e2e-tests-0123"


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    e = start(tmp_path_factory.mktemp("client"), "--publish-key", PUBLISH_KEY,
              "--admin-key", ADMIN_KEY, "--secret", SECRET, "--segment-min", "2",
              "--client-rate", "0")
    yield e
    e.stop()
    log = e.log_text()
    assert "Unhandled" not in log and "Traceback" not in log, log[-5000:]


@pytest.fixture(scope="module")
def slow_node(tmp_path_factory):
    e = start(tmp_path_factory.mktemp("limited"), "--publish-key", PUBLISH_KEY,
              "--client-rate", "1")
    yield e
    e.stop()


class Flavour:
    """One flavour's client, and a way to await any of its calls."""

    def __init__(self, name: str, url: str, **keys: Any) -> None:
        self.name = name
        self.pool: HTTPConnectionPool | None = None
        if name == "sync":
            self.client: Any = SyncClient(url, **keys)
        else:
            self.pool = HTTPConnectionPool(reactor)
            self.client = TwistedClient(reactor, url, http=HTTPClient(Agent(reactor, pool=self.pool)),
                                        **keys)

    async def __call__(self, method: str, *args: Any, **kwargs: Any) -> Any:
        result = getattr(self.client, method)(*args, **kwargs)
        if isinstance(result, Deferred):
            result = await result
        return result

    async def close(self) -> None:
        if self.pool is not None:
            await self.pool.closeCachedConnections()
        else:
            self.client.close()


@pytest.fixture(params=["sync", "twisted"])
def flavour(request):
    return request.param


def stream(id_: int, **fields: Any) -> dict:
    return {"id": id_, "title": f"Stream {id_}", "user_id": 1, "live": True, "public": True,
            "created_at": f"2026-12-01T10:00:{id_ % 60:02d}Z", **fields}


async def raises(kind: type, call: Any) -> Any:
    with pytest.raises(kind) as caught:
        await call
    return caught.value


@pytest_twisted.ensureDeferred
async def test_publishing_and_a_refused_batch(node, flavour):
    c = Flavour(flavour, node.base, publish_key=PUBLISH_KEY)
    base = 1000 if flavour == "sync" else 2000
    try:
        sid = await c("rpc", "session.create")
        key, state = await c("rpc", "stream.subscribe_user", [sid, base, 10])
        assert state == []
        assert await c("upsert", "Stream", stream(base + 1, user_id=base)) == 1
        assert await c("upsert_many", "Stream", [stream(base + 2, user_id=base),
                                                 stream(base + 3, user_id=base)]) == 2
        assert await c("publish", {"type": "Stream", "action": "update",
                                   "obj": stream(base + 3, user_id=base, title="Renamed")}) == 1
        assert await c("delete", "Stream", base + 2) == 1
        error = await raises(BadInput, c("publish", [
            {"type": "Stream", "action": "upsert", "obj": stream(base + 4, user_id=base)},
            {"type": "Stream", "action": "replace", "obj": stream(base + 5, user_id=base)},
            {"type": "Stream", "action": "upsert", "obj": {"title": "no id"}}]))
        assert error.status == 400 and error.message == "malformed change"
        assert set(error.changes) == {1, 2}
        assert "upsert, insert, update, delete" in error.changes[1]
        assert "'obj.id'" in error.changes[2]
        events = await c("rpc", "session.get_events", [sid, 0, 0])
        assert [(e["action"], e["obj"]["id"]) for e in events] == [
            ("insert", base + 1), ("insert", base + 2), ("insert", base + 3),
            ("update", base + 3), ("delete", base + 2)]       # nothing of the refused batch
        assert await c("delete_many", "Stream", [base + 1, base + 3]) == 2
        wrong = Flavour(flavour, node.base, publish_key="not-the-key")
        refused = await raises(Unauthorized, wrong("upsert", "Stream", stream(base + 9)))
        assert refused.status == 401 and refused.attempts == 1
        await wrong.close()
    finally:
        await c.close()


@pytest_twisted.ensureDeferred
async def test_bloom_filters(node, flavour):
    c = Flavour(flavour, node.base, publish_key=PUBLISH_KEY)
    k = f"{flavour}-visitors"
    try:
        assert await c("bf_reserve", k, 0.01, 1000) == "OK"
        taken = await raises(Rejected, c("bf_reserve", k, 0.01, 1000))
        assert (taken.code, taken.message) == (1010, "item exists")
        assert await c("bf_add", k, "ann") is True
        assert await c("bf_add", k, "ann") is False
        assert await c("bf_madd", k, ["bob", "ann", 42]) == [True, False, True]
        assert await c("bf_exists", k, "bob") is True
        assert await c("bf_exists", k, "nobody") is False
        assert await c("bf_mexists", k, ["ann", "42", "zed"]) == [True, True, False]
        full = await c("bf_insert", f"{flavour}-small", ["a", "b", "c"], capacity=2,
                       nonscaling=True)
        assert full[:2] == [True, True] and isinstance(full[2], Rejected)
        assert full[2].message == "non scaling filter is full"
        missing = await raises(Rejected, c("bf_insert", f"{flavour}-none", ["a"], nocreate=True))
        assert missing.message == "not found"
        info = await c("bf_info", k)
        assert info["Capacity"] == 1000 and info["Number of items inserted"] == 3
        assert info["Expansion rate"] == 2
        bad = await raises(BadInput, c("bf_reserve", f"{flavour}-bad", 2.0, 10))
        assert bad.code == -32602
    finally:
        await c.close()


@pytest_twisted.ensureDeferred
async def test_segments_upload_with_progress_list_and_delete(node, flavour, tmp_path):
    c = Flavour(flavour, node.base, publish_key=PUBLISH_KEY)
    name = f"{flavour}-vip"
    rows = [f"7999555{i:04d},user{i}@example.com" for i in range(400)]
    path = tmp_path / "contacts.csv"
    path.write_text("phone,email\n" + "\n".join(rows) + "\n", "utf-8")
    size = path.stat().st_size
    progress: list = []
    try:
        counts = await c("upload_segment", name, str(path), block=1024,
                         progress=lambda sent, total: progress.append((sent, total)))
        assert counts["name"] == name and counts["rows"] == 400 and counts["valid"] == 800
        assert progress[0] == (0, size) and progress[-1] == (size, size)
        assert len(progress) == 1 + -(-size // 1024)
        sent = [s for s, _ in progress]
        assert sent == sorted(sent)
        listed = {s["name"]: s for s in await c("segments")}
        assert listed[name]["valid"] == 800
        data = path.read_bytes()
        blocks = [data[i:i + 500] for i in range(0, len(data), 500)]
        again = await c("upload_segment", name + "-2", iter(blocks), size=len(data))
        assert again["valid"] == 800
        refused = await raises(BadInput, c("upload_segment", name + "-bad",
                                           b"phone;email\n79995551111;a@b.ru\n"))
        assert (refused.status, refused.code, refused.line) == (400, "header_validation", 1)
        few = await raises(BadInput, c("upload_segment", name + "-few", b"phone\n79995551111\n"))
        assert few.code == "too_few_unique" and few.data["valid"] == 1
        assert await c("delete_segment", name) is True
        assert await c("delete_segment", name) is False
        assert await c("delete_segment", name + "-2") is True
        assert name not in {s["name"] for s in await c("segments")}
    finally:
        await c.close()


@pytest_twisted.ensureDeferred
async def test_stats_health_and_any_method(node, flavour):
    c = Flavour(flavour, node.base)
    try:
        sid = await c("rpc", "session.create")
        user = 340000 + (1 if flavour == "sync" else 2)
        token = jwt.encode({"sub": str(user)}, SECRET, algorithm="HS256")
        assert await c("rpc", "session.authorize", [sid, token]) == user
        key, _ = await c("rpc", "session.subscribe", {"sid": sid, "view": "WordStreamView",
                                                       "params": {"word": flavour}})
        assert await c("online") >= 1
        assert await c("online", key) == 1
        assert await c("unique", key) == 1
        assert (await c("health"))["status"] == "ok"
        assert await c("rpc", "session.destroy", [sid]) is True
    finally:
        await c.close()


@pytest_twisted.ensureDeferred
async def test_admin_calls(node, flavour):
    c = Flavour(flavour, node.base, admin_key=ADMIN_KEY)
    try:
        until = time.monotonic() + 10
        stats = await c("admin_stats")
        while not stats and time.monotonic() < until:     # the first figures come within 1 s
            await task.deferLater(reactor, 0.1)
            stats = await c("admin_stats")
        assert stats and stats[0]["node"] == "e2e"
        sid = await c("rpc", "session.create")
        key, state = await c("admin_subscribe", sid)
        assert key == "$admin.NodeStats" and state
        looked = await c("admin_session", sid)
        assert looked["session"] == sid and looked["here"] is True
        assert "$admin.NodeStats" in [s["key"] for s in looked["subscriptions"]]
        assert await c("admin_unsubscribe", sid) is True
        assert await c("admin_session", "no-such-session") is None
        change = {"type": "Stream", "action": "upsert", "obj": stream(3000 + len(flavour))}
        assert await c("admin_publish", [change]) == 1
        bad = await raises(BadInput, c("admin_publish", [{"type": "Stream", "action": "x",
                                                          "obj": {"id": 1}}]))
        assert bad.code == -32602
        wrong = Flavour(flavour, node.base, admin_key="a-wrong-admin-key-000")
        assert (await raises(Unauthorized, wrong("admin_stats"))).code == 1003
        await wrong.close()
    finally:
        await c.close()


@pytest_twisted.ensureDeferred
async def test_a_429_from_a_node_with_a_low_client_rate(slow_node, flavour):
    once = Flavour(flavour, slow_node.base, publish_key=PUBLISH_KEY, retry=NO_RETRY)
    patient = Flavour(flavour, slow_node.base, publish_key=PUBLISH_KEY,
                      retry=RetryPolicy(attempts=6, total=20))
    try:
        limited = None
        for _ in range(20):            # a burst of 2 calls, 1 a second after it
            try:
                await once("bf_exists", "k", "a")
            except RateLimited as e:
                limited = e
                break
        assert limited is not None, "the node never refused"
        assert (limited.status, limited.code, limited.attempts) == (429, 1007, 1)
        assert limited.retry_after is not None and limited.retry_after >= 1
        started = time.monotonic()
        assert await patient("bf_exists", "k", "a") is False      # waited, then answered
        assert time.monotonic() - started >= 0.5
    finally:
        await once.close()
        await patient.close()
