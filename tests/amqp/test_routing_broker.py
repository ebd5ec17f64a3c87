"""Interest-based routing against the real RabbitMQ: engine nodes in this
process, each with its AMQP feed in ``interest`` mode and its bindings, and
a backend database the publisher writes before it publishes (the nodes read
their views' initial states from it, as from ``--store-url``).

A negative ("node 2 did not get it") is seen through a positive that comes
after it: a change of a type without routing fields, which every node
receives, published behind the changes under test.
"""
from __future__ import annotations

import pytest
import pytest_twisted
from twisted.internet import reactor
from twisted.internet.defer import Deferred, gatherResults

from pushengine.amqp.interest import Bindings
from pushengine.amqp.routing import BROADCAST
from pushengine.app.engine import build_engine
from pushengine.core.changes import Change
from pushengine.stores.memory import MemoryStore
from pushengine.views.spec import parse_catalog
from tests.amqp.conftest import rabbitmqctl
from tests.deferreds import eventually

pytestmark = pytest.mark.service

VIEWS = {
    "types": {"Stream": {"id": "id", "route": ["user_id"]}, "Marker": {"id": "id"}},
    "views": {
        "UserStreams": {"type": "Stream", "params": ["user_id", "limit"],
                        "where": {"user_id": "$user_id", "public": True},
                        "order": "-created_at", "limit": {"default": 50, "max": 50}},
        "AllStreams": {"type": "Stream", "params": ["limit"], "where": {"public": True},
                       "order": "-created_at", "limit": {"default": 50, "max": 50}},
        "Markers": {"type": "Marker", "order": "id"},
    },
}
CATALOG = parse_catalog(VIEWS)


class Database:
    """The backend's objects: written before a change is published."""

    def __init__(self) -> None:
        self.store = MemoryStore(CATALOG.id_fields)

    def write(self, changes: list[Change]) -> None:
        self.store.apply_changes(changes)


class BackendStore:
    """A node's store: answers from the database, learns nothing from the feed."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def query(self, view, params, limit):
        return self.db.store.query(view, params, limit)

    def apply_changes(self, changes) -> None:
        pass


class Recorder:
    """The feed's sink: keeps the ids of the changes a node received, then
    hands them to the engine."""

    def __init__(self, engine) -> None:
        self.engine = engine
        self.received: list[tuple[str, object]] = []

    def apply_changes(self, changes) -> None:
        self.received += [(c.type, c.id) for c in changes]
        self.engine.apply_changes(changes)

    def feed_gap(self) -> None:
        self.engine.feed_gap()

    def streams(self) -> list:
        return [i for t, i in self.received if t == "Stream"]

    def markers(self) -> list:
        return [i for t, i in self.received if t == "Marker"]


class EngineNode:
    def __init__(self, amqp, name: str, db: Database, linger: float = 0.5) -> None:
        self.bindings = Bindings(reactor, linger=linger)
        self.engine = build_engine(reactor, CATALOG, BackendStore(db),
                                   interest=self.bindings)
        self.sink = Recorder(self.engine)
        self.feed = amqp.feed(name, routing="interest", routes=CATALOG.routes,
                              bindings=self.bindings)

    async def start(self) -> None:
        self.feed.start(self.sink)
        await eventually(lambda: self.feed.state == "connected", 10, "the feed to connect")

    def open(self, view: str, limit: int = 50, **params) -> Deferred:
        return self.engine.registry.open(CATALOG.views[view].bind(params, None, limit))


def stream(id_: int, user_id, created: int = 0, **fields) -> Change:
    obj = {"id": id_, "user_id": user_id, "public": True, "created_at": created or id_}
    obj.update(fields)
    return Change("Stream", "upsert", id_, obj)


def marker(id_: int) -> Change:
    return Change("Marker", "upsert", id_, {"id": id_})


@pytest_twisted.async_yield_fixture
async def cluster(amqp):
    amqp.exchange_type = "topic"
    db = Database()
    nodes = [EngineNode(amqp, "a", db), EngineNode(amqp, "b", db)]
    for node in nodes:
        await node.start()
    yield db, nodes


async def publish(db: Database, node: EngineNode, changes: list[Change]) -> None:
    db.write(changes)
    await node.feed.publish(changes)


async def both_saw_marker(nodes, id_: int) -> None:
    await eventually(lambda: all(id_ in n.sink.markers() for n in nodes), 10,
                     f"marker {id_} on every node")


@pytest_twisted.ensureDeferred
async def test_a_change_reaches_only_the_nodes_of_its_views(cluster):
    db, (a, b) = cluster
    view_a = await a.open("UserStreams", user_id=1)
    view_b = await b.open("UserStreams", user_id=2)
    assert a.bindings.bound == {BROADCAST, "Stream.n1"}
    await publish(db, a, [stream(11, 1), stream(21, 2), stream(31, 3)])
    await publish(db, b, [stream(12, 1), stream(22, 2), marker(1)])
    await both_saw_marker((a, b), 1)
    assert a.sink.streams() == [11, 12] and b.sink.streams() == [21, 22]
    assert [o["id"] for o in view_a.state()] == [12, 11]
    assert [o["id"] for o in view_b.state()] == [22, 21]
    # a batch for several users is split: each part goes to its node
    await publish(db, a, [stream(13, 1), stream(23, 2), stream(14, 1), marker(2)])
    await both_saw_marker((a, b), 2)
    assert a.sink.streams() == [11, 12, 13, 14] and b.sink.streams() == [21, 22, 23]


@pytest_twisted.ensureDeferred
async def test_a_catch_all_view_sees_every_change(cluster):
    db, (a, b) = cluster
    await a.open("UserStreams", user_id=1)
    everything = await b.open("AllStreams")
    assert "Stream.#" in b.bindings.bound
    await publish(db, a, [stream(i, i % 4) for i in range(1, 9)] + [marker(1)])
    await both_saw_marker((a, b), 1)
    assert b.sink.streams() == list(range(1, 9))
    assert a.sink.streams() == [1, 5]
    assert [o["id"] for o in everything.state()] == list(range(8, 0, -1))


@pytest_twisted.ensureDeferred
async def test_the_last_subscriber_gone_the_binding_goes(cluster):
    db, (a, b) = cluster
    window = await b.open("UserStreams", user_id=7)
    await publish(db, a, [stream(1, 7), marker(1)])
    await both_saw_marker((a, b), 1)
    assert b.sink.streams() == [1]
    window.subscribers.clear()
    b.engine.registry.close(window)
    await eventually(lambda: "Stream.n7" not in b.bindings.bound, 10, "the unbinding")
    await eventually(lambda: b.bindings.unbinds == 1, 10, "the unbind-ok")
    await publish(db, a, [stream(2, 7), marker(2)])
    await both_saw_marker((a, b), 2)
    assert b.sink.streams() == [1]


@pytest_twisted.ensureDeferred
async def test_a_subscription_during_a_burst_loses_nothing(cluster):
    db, (a, b) = cluster
    ids = list(range(1, 41))
    opened: list[Deferred] = []
    for version in range(8):
        burst = []
        for id_ in ids:
            changes = [stream(id_, 5, created=id_, v=version)]
            db.write(changes)
            burst.append(a.feed.publish(changes))
            if version == 2 and id_ == 20:
                # subscribe in the middle of the burst: the binding is
                # confirmed while later versions are being written and published
                opened.append(b.open("UserStreams", user_id=5))
        await gatherResults(burst)
    assert b.sink.streams(), "the node received the changes after its binding"
    await publish(db, a, [marker(1)])
    await both_saw_marker((a, b), 1)
    window = await opened[0]
    expected = await db.store.query(CATALOG.views["UserStreams"], {"user_id": 5}, 50)
    assert window.state() == expected
    assert [o["v"] for o in window.state()] == [7] * 40


@pytest_twisted.ensureDeferred
async def test_an_object_that_changes_user_leaves_the_old_users_view(cluster):
    db, (a, b) = cluster
    old = await a.open("UserStreams", user_id=1)
    new = await b.open("UserStreams", user_id=2)
    await publish(db, a, [stream(1, 1), marker(1)])
    await both_saw_marker((a, b), 1)
    assert [o["id"] for o in old.state()] == [1] and new.state() == []
    moved = Change("Stream", "upsert", 1, stream(1, 2).obj, was={"user_id": 1})
    await publish(db, b, [moved, marker(2)])
    await both_saw_marker((a, b), 2)
    assert old.state() == [] and [o["id"] for o in new.state()] == [1]
    assert a.sink.streams() == [1, 1] and b.sink.streams() == [1]
    # a node that holds both users gets both copies and applies one
    everything = await a.open("UserStreams", user_id=2)
    back = Change("Stream", "upsert", 1, stream(1, 1).obj, was={"user_id": 2})
    await publish(db, b, [back, marker(3)])
    await both_saw_marker((a, b), 3)
    assert a.sink.streams() == [1, 1, 1] and a.feed.duplicate_copies == 1
    assert [o["id"] for o in old.state()] == [1] and everything.state() == []
    assert new.state() == []


@pytest_twisted.ensureDeferred
async def test_bindings_are_made_again_after_a_reconnection(cluster, need_rabbitmqctl):
    from tests.amqp.conftest import connection_pid
    db, (a, b) = cluster
    view = await b.open("UserStreams", user_id=3)
    binds = b.bindings.binds
    pid = await connection_pid(b.feed.client)
    await rabbitmqctl("close_connection", pid, "test")
    await eventually(lambda: b.feed.reconnects == 1 and b.feed.state == "connected", 20,
                     "the reconnection")
    await eventually(lambda: b.bindings.binds == binds + 2, 10,
                     "BROADCAST and Stream.n3 bound again")
    await publish(db, a, [stream(1, 3), marker(1)])
    await both_saw_marker((a, b), 1)
    assert [o["id"] for o in view.state()] == [1]


@pytest_twisted.ensureDeferred
async def test_pushengine_publish_sets_the_routing_keys(cluster, amqp, tmp_path):
    import json

    import yaml

    from tests.amqp.test_feed_broker import run_cli
    db, (a, b) = cluster
    views = tmp_path / "views.yaml"
    views.write_text(yaml.safe_dump(VIEWS))
    await a.open("UserStreams", user_id=1)
    await b.open("UserStreams", user_id=2)
    batch = [c.to_json() for c in (stream(1, 1), stream(2, 2), marker(1))]
    out, err, code = await run_cli("--amqp", amqp.url, "--exchange", amqp.exchange,
                                   "--routing", "interest", "--views", str(views),
                                   json.dumps(batch))
    assert code == 0, err
    assert out.decode().startswith("3 change(s) in 1 message(s) confirmed")
    await both_saw_marker((a, b), 1)
    assert a.sink.streams() == [1] and b.sink.streams() == [2]
    out, err, code = await run_cli("--amqp", amqp.url, "--routing", "interest", "[]")
    assert code == 2 and b"--routing interest needs --views" in err



@pytest_twisted.ensureDeferred
async def test_a_lost_queue_is_bound_again_and_its_views_reset(cluster, amqp):
    db, (a, b) = cluster
    view = await b.open("UserStreams", user_id=4)
    resets = []
    view.reset = lambda: resets.append(True)       # what a gap's re-read calls
    publisher = await amqp.publisher()
    channel = await publisher.client.open_channel()
    first = b.feed.client
    # the queue and its bindings are gone; a change is published meanwhile
    await channel.queue_delete(queue=b.feed.queue)
    db.write([stream(1, 4)])
    await eventually(lambda: b.feed.state == "connected" and b.feed.client is not first, 20,
                     "the reconnection")
    await eventually(lambda: resets, 10, "the view re-read after the gap")
    # the views are re-read once the keys are bound to the new queue
    assert b.feed.gaps == 1 and "Stream.n4" in b.bindings.bound
    assert [o["id"] for o in view.state()] == [1]
    await publish(db, a, [stream(2, 4), marker(1)])
    await both_saw_marker((a, b), 1)
    assert [o["id"] for o in view.state()] == [2, 1]

# -- whole nodes, as the composition root builds them --------------------------------


class WholeNode:
    """A ``Node`` of app/service.py on the real reactor and RabbitMQ, driven
    through its own HTTP resource (not listening on a port)."""

    def __init__(self, amqp, name: str, views: str) -> None:
        from pushengine.app.service import Node
        from tests.http.harness import Http, Rpc, options
        self.node = Node(options("--amqp", amqp.url, "--amqp-exchange", amqp.exchange,
                                 "--amqp-routing", "interest", "--views", views,
                                 "--node-id", amqp.node(name)), reactor)
        amqp.feeds.append(self.node.feed)         # stopped and deleted at the end
        self.http = Http(self.node.web.resource())
        self.rpc = Rpc(self.http)

    async def call(self, method: str, *params):
        pending = self.rpc.send(method, *params)
        await eventually(lambda: pending.done, 10, f"the answer to {method}")
        return self.rpc.unwrap(pending.json())

    async def publish(self, changes: list[Change]) -> None:
        import json
        pending = self.http.send("POST", "/api/publish",
                                 json.dumps([c.to_json() for c in changes]),
                                 {"content-type": "application/json"})
        await eventually(lambda: pending.done, 10, "the publish")
        assert pending.reply().code == 200, pending.reply()

    def applied(self) -> float:
        return self.node.feed.stats()["changes_applied"]


@pytest_twisted.ensureDeferred
async def test_whole_nodes_route_by_the_views_file(amqp, tmp_path):
    import yaml
    amqp.exchange_type = "topic"
    views = tmp_path / "views.yaml"
    text = dict(VIEWS)
    text["views"] = {name: dict(v, method=f"t.{name.lower()}")
                     for name, v in VIEWS["views"].items()}
    views.write_text(yaml.safe_dump(text))
    a, b = WholeNode(amqp, "a", str(views)), WholeNode(amqp, "b", str(views))
    assert a.node.engine.registry.interest is a.node.feed.bindings
    for n in (a, b):
        n.node.feed.start(n.node.sink)
        await eventually(lambda n=n: n.node.feed.state == "connected", 10, "a connection")
    sid_a = await a.call("session.create")
    sid_b = await b.call("session.create")
    key_a, _ = await a.call("t.userstreams", sid_a, 1, 10)
    key_b, _ = await b.call("t.userstreams", sid_b, 2, 10)
    await a.publish([stream(1, 1), stream(2, 2), stream(3, 3)])
    await b.publish([marker(1)])
    await eventually(lambda: a.applied() == 2 and b.applied() == 2, 10, "both nodes")
    events_a = await a.call("session.get_events", sid_a, 0)
    events_b = await b.call("session.get_events", sid_b, 0)
    assert [(e["key"], e["action"], e["obj"]["id"]) for e in events_a] == [(key_a, "insert", 1)]
    assert [(e["key"], e["action"], e["obj"]["id"]) for e in events_b] == [(key_b, "insert", 2)]
