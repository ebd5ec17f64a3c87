"""Three real nodes behind haproxy, on RabbitMQ, memcached and Redis; one is
killed with SIGKILL in the middle of a stream of changes.

Every client subscribes through the balancer with ``?session=`` and keeps
its own copy of its view from the events. The test checks that every client
receives its changes whichever node it sits on, that the clients of the
killed node continue on the others with the same session after a ``reset``,
that every copy ends equal to the truth, and that the online counters count
every session once across nodes.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import time

import pytest

from tests.cluster.conftest import CLUSTER_DB, REDIS_HOST, REDIS_PORT
from tests.cluster.processes import (
    Client, Cluster, World, call, haproxy_config, publish, traffic)
from tests.cluster.resp import Resp
from tests.services import require_program, require_service
from tests.waiting import wait_until

pytestmark = [pytest.mark.service, pytest.mark.e2e]

CLIENTS = 18
VIEWS = [("PublicLiveStreamView", "stream.subscribe_public_live", {}, 10),
         ("UserStreamView", "stream.subscribe_user", {"user_id": 1}, 5),
         ("UserStreamView", "stream.subscribe_user", {"user_id": 2}, 5)]


def metric(node, name: str) -> float:
    return node.metric(name)


@pytest.fixture
def cluster(tmp_path):
    require_service("RabbitMQ", "127.0.0.1", 5672)
    require_service("Redis", REDIS_HOST, REDIS_PORT)
    require_program("memcached")
    require_program("haproxy")
    with Resp(REDIS_HOST, REDIS_PORT, CLUSTER_DB) as r:
        r("FLUSHDB")
    c = Cluster(tmp_path, nodes=3, redis_db=CLUSTER_DB, max_timeout=5)
    try:
        c.start()
        yield c
    finally:
        c.stop()


def test_a_node_dies_and_its_clients_continue_elsewhere(cluster: Cluster) -> None:
    world = World(seed=11)
    publish(cluster.base, [world.change() for _ in range(40)])   # some state to start from
    clients = [Client(cluster.base, *VIEWS[i % len(VIEWS)]) for i in range(CLIENTS)]
    for c in clients:
        c.start()
    for c in clients:
        assert c.ready.wait(20), "a client did not get going"
        assert c.error is None, c.error
    sids = {c.sid for c in clients}
    assert len(sids) == CLIENTS

    # sessions sit on their balancer's node, spread over all three
    wait_until(lambda: sum(metric(n, "pushengine_sessions") for n in cluster.nodes) == CLIENTS,
               10, "one copy of every session")
    held = {n.name: metric(n, "pushengine_sessions") for n in cluster.nodes}
    assert all(v > 0 for v in held.values()), held

    traffic(cluster.base, world, 3)
    victim = max(cluster.nodes, key=lambda n: metric(n, "pushengine_sessions"))
    moving = [c for c in clients if c.node() == victim.name]
    assert moving, "the victim holds sessions"
    killed_at = time.monotonic()
    victim.sigkill()
    traffic(cluster.base, world, 4)
    survivors = cluster.alive()

    # every copy converges to the truth
    def converged():
        return all(c.state() == c.truth(world) for c in clients)
    wait_until(converged, 20, "every client's view equal to the truth")

    for c in clients:
        assert c.error is None, c.error
        assert c.violations == [], (c.sid, c.violations)
        assert c.rpc_errors == [], (c.sid, c.rpc_errors)     # never 1001: resumed instead
    for c in moving:
        after = [t for t, _ in c.resets if t >= killed_at]
        assert after, f"session {c.sid} got no reset after its node died"
        assert c.node() != victim.name and c.node() in {n.name for n in survivors}
    for c in clients:
        if c not in moving:
            assert not c.resets, f"session {c.sid} was reset without moving"

    # resume times: from the kill to the reset on the new node
    delays = sorted(min(t for t, _ in c.resets if t >= killed_at) - killed_at for c in moving)
    assert delays[-1] < 10, delays
    print(f"\n{len(moving)} of {CLIENTS} sessions moved from {victim.name}; reset after "
          f"{delays[0]:.2f}..{delays[-1]:.2f} s; {len(world.objects)} objects, "
          f"{world.next_id - 1} streams; held before: {held}")

    # each session once: per node, and in memcached across nodes
    wait_until(lambda: sum(metric(n, "pushengine_sessions") for n in survivors) == CLIENTS,
               10, "the survivors to hold every session once")
    redis_moved = sum(metric(n, "pushengine_redis_moved_in_total") for n in survivors)
    assert redis_moved >= len(moving)
    online, _ = call(cluster.base, "stats.online", [])
    assert online == CLIENTS
    for view, _, params, limit in VIEWS:
        key = (f"{view}(limit={limit})" if not params else
               f"{view}({';'.join(f'{k}={v}' for k, v in params.items())};limit={limit})")
        count, _ = call(cluster.base, "stats.online", [key])
        expected = sum(1 for c in clients if c.key == key)
        assert count == expected, (key, count, expected)

    # the registry holds every session, owned by a survivor
    with Resp(REDIS_HOST, REDIS_PORT, CLUSTER_DB) as r:
        owners = {r("HGET", f"pushengine:session:{sid}", "owner") for sid in sids}
    assert owners <= {n.name for n in survivors}, owners

    for c in clients:
        c.stopping.set()
    for c in clients:
        c.join(15)
    for node in survivors:
        log = node.log_text()
        assert "Unhandled" not in log and "Traceback" not in log, log[-4000:]


def test_the_shipped_haproxy_config_is_the_template_rendered(tmp_path) -> None:
    """deploy/haproxy.cfg is deploy/haproxy.cfg.in for three nodes,
    deploy/haproxy-cores.cfg for two nodes on one machine, and haproxy
    accepts all three (the nginx example too, where nginx is installed)."""
    from tests.cluster.processes import ROOT
    shipped = (ROOT / "deploy" / "haproxy.cfg").read_text("utf-8")
    rendered = haproxy_config("*:80", [("node1", "10.0.0.11:8080"), ("node2", "10.0.0.12:8080"),
                                       ("node3", "10.0.0.13:8080")],
                              timeout="120s", check_inter="2s", maxconn=200000)
    assert shipped == rendered
    # one node per core: two nodes on this machine, the balancer on 8080
    cores = (ROOT / "deploy" / "haproxy-cores.cfg").read_text("utf-8")
    assert cores == haproxy_config("*:8080", [("core1", "127.0.0.1:8081"),
                                              ("core2", "127.0.0.1:8082")],
                                   timeout="120s", check_inter="2s", maxconn=9000)
    haproxy = require_program("haproxy")
    for name in ("haproxy.cfg", "haproxy-cores.cfg"):
        check = subprocess.run([haproxy, "-c", "-f", str(ROOT / "deploy" / name)],
                               capture_output=True, text=True)
        assert check.returncode == 0, name + ": " + check.stdout + check.stderr
    nginx = shutil.which("nginx") or next(
        (p for p in ("/usr/sbin/nginx", "/usr/local/sbin/nginx") if os.path.exists(p)), None)
    if nginx is None:
        return  # the nginx example is only an example: nothing else needs nginx
    check = subprocess.run([nginx, "-t", "-p", str(tmp_path), "-c",
                            str(ROOT / "deploy" / "nginx.conf"), "-g",
                            f"pid {tmp_path}/nginx.pid; error_log stderr;"],
                           capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
