"""Several engine nodes in one process, on one Clock, sharing an in-process
registry (``SharedTable``) and an in-process "memcached" — the cluster of
SPEC section 8 without sockets, driven through each node's real resource.

A change is published to every node (as the AMQP fanout would); a client
is a session id plus the node it talks to, which the test chooses (as a
balancer would).
"""
from __future__ import annotations

from typing import Any

from twisted.internet.task import Clock

from pushengine.cluster import build_cluster, registry_ttl
from pushengine.cluster.memory import MemoryRegistry, SharedTable
from pushengine.memcache import InMemoryCache
from pushengine.app.service import Node
from tests.http.harness import Http, Rpc, options

START = 1_700_000_000.0  # a realistic unix time, at the start of an online period


class ClusterNode(Node):
    def __init__(self, cluster: "MemoryCluster", node_id: str, *argv: str) -> None:
        self.shared = cluster
        self.clock = cluster.clock
        super().__init__(options("--node-id", node_id, *argv), cluster.clock)
        self.online.cache = cluster.cache  # every node counts into the same figures
        self.feed.start(self.engine)
        self.http = Http(self.web.resource())
        self.rpc = Rpc(self.http)

    def _cluster(self) -> Any:
        settings = self.engine.sessions.settings
        ttl = registry_ttl(settings.session_timeout, settings.max_timeout,
                           self.shared.refresh)
        self.registry = MemoryRegistry(self.shared.table, self.options["node-id"], ttl)
        self.sources["redis"] = self.registry
        return build_cluster(self.registry, self.engine, self.online, self.clock,
                             self.shared.refresh)

    @property
    def sessions(self) -> dict:
        return self.engine.sessions.sessions


class MemoryCluster:
    def __init__(self, n: int = 2, *argv: str, refresh: float = 10.0) -> None:
        self.clock = Clock()
        self.clock.advance(START)
        self.refresh = refresh
        self.table = SharedTable(self.clock)
        self.cache = InMemoryCache(self.clock)
        self.nodes = [ClusterNode(self, f"node-{i}", *argv) for i in range(n)]

    def publish(self, *objs: dict, action: str = "upsert") -> None:
        """A change reaches every node (the fanout exchange)."""
        changes = [{"type": "Stream", "action": action, "obj": o} for o in objs]
        for node in self.nodes:
            reply = node.http.post("/api/publish", changes)
            assert reply.code == 200, reply

    def entry(self, sid: str) -> dict | None:
        return self.table.get(sid)


def stream(id_: int, created: int, **fields: Any) -> dict:
    obj = {"id": id_, "title": f"stream {id_}", "user_id": 1, "live": True, "public": True,
           "created_at": created}
    obj.update(fields)
    return obj
