"""Interest-based routing against fanout: the change rate a cluster takes.

    python bench/routing.py [--nodes 4] [--users 400] [--rates 100,200,400]
                            [--seconds 4] [--modes fanout,interest]
                            [--node-cpu PERCENT]

For each mode, ``--nodes`` ``twistd -n pushengine`` nodes on RabbitMQ
(``--amqp-routing MODE``, a throw-away exchange of the mode's type), with
``--users`` sessions spread over them, each subscribed to its user's view
(``UserStreams(user_id=U)``; the views file declares ``route: [user_id]``).
A publisher (pika, on the exchange itself, one change per message, a new
object for a user drawn uniformly) sends at each rate of ``--rates`` for
``--seconds``; after each step the script waits until every node has applied
what it should (every change in fanout, the changes of its users in interest
mode: the nodes' /metrics), and reports per step:

- the publish rate reached; the rate the cluster took: changes published per
  second, from the first publish until every node has applied its share
  (behind the publisher, the broker queues what the nodes have not taken);
  and the changes applied per second summed over the nodes;
- each node's CPU (from /proc) in % of a core over the step, and in
  microseconds per published change.

At the end every session reads its events once: each object published for
its user must have come exactly once (``insert``), and nothing else; lost
and duplicated events are counted per session and summed. The nodes are
stopped, and the exchange and their queues deleted, by the script itself.

``--nodes`` may list several cluster sizes (``1,2,4``): each mode runs once
per size, so that one run shows how the rate a cluster takes grows (or not)
with its nodes.

``--node-cpu PERCENT`` caps each node at that share of one core once its
sessions are set up (``bench/cpucap.py``, the kernel's CPU controller; needs
root), and lifts the cap before the final check. On a machine with fewer cores
than nodes, uncapped nodes share what the broker and the publisher leave, and
the cluster's ceiling cannot show; capped, each node is a small machine of its
own, and a rate above what the nodes can apply shows the ceiling of each mode.

Needs RabbitMQ on 127.0.0.1:5672 (guest/guest) and pika. Uncapped on a shared
machine, keep the rates small: the figure that matters is then the CPU per
published change of each node, and how it changes between the modes.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, ROOT)

from cpucap import CpuCap  # noqa: E402
from driver import AMQP_URL, EngineServer  # noqa: E402

from pushengine.amqp.routing import routing_key  # noqa: E402
from pushengine.core.topics import pin  # noqa: E402

VIEWS = {
    "types": {"Stream": {"id": "id", "route": ["user_id"]}},
    "views": {"UserStreams": {"type": "Stream", "method": "bench.subscribe_user",
                              "params": ["user_id", "limit"],
                              "where": {"user_id": "$user_id", "public": True},
                              "order": "-created_at", "limit": {"default": 50, "max": 50}}},
}
TICKS = os.sysconf("SC_CLK_TCK")


def rpc(url: str, method: str, *params: Any) -> Any:
    body = json.dumps({"jsonrpc": "2.0", "method": method, "params": list(params),
                       "id": 1}).encode()
    request = urllib.request.Request(url + "/api/jsonrpc", body,
                                     {"Content-Type": "application/json"})
    answer = json.loads(urllib.request.urlopen(request, timeout=30).read())
    if "error" in answer:
        raise RuntimeError(f"{method}: {answer['error']}")
    return answer["result"]


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def applied(node: EngineServer) -> float:
    return node.metrics().get("pushengine_feed_changes_applied_total", 0.0)


def metric(node: EngineServer, name: str) -> float:
    """A series without labels, from the node's /metrics."""
    try:
        text = urllib.request.urlopen(node.url + "/metrics", timeout=2).read().decode()
    except OSError:
        return 0.0
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return node.metrics().get(name, 0.0)


class Cluster:
    def __init__(self, mode: str, nodes: int, users: int, views_file: str,
                 node_cpu: float | None = None) -> None:
        tag = f"{os.getpid()}-{int(time.time())}"
        self.tag = tag
        self.mode = mode
        self.node_cpu = node_cpu
        self.caps: list[CpuCap] = []
        self.exchange = f"pushengine.bench.routing.{mode}.{tag}"
        self.node_ids = [f"bench-routing-{mode}-{tag}-{i}" for i in range(nodes)]
        self.servers = [EngineServer(["--amqp", AMQP_URL, "--amqp-exchange", self.exchange,
                                      "--amqp-routing", mode, "--node-id", node_id,
                                      "--views", views_file, "--max-queue", "100000",
                                      "--session-timeout", "900"])
                        for node_id in self.node_ids]
        self.users = list(range(1, users + 1))
        self.sessions: dict[int, tuple[EngineServer, str]] = {}

    def start(self) -> None:
        for server in self.servers:
            server.start()
        for user in self.users:
            server = self.servers[user % len(self.servers)]
            sid = rpc(server.url, "session.create")
            rpc(server.url, "bench.subscribe_user", sid, user, 50)
            self.sessions[user] = (server, sid)
        if self.node_cpu is not None:
            for i, server in enumerate(self.servers):
                cap = CpuCap(f"pushengine-bench-{self.tag}-{i}", self.node_cpu)
                self.caps.append(cap)
                for pid in server.pids():
                    cap.add(pid)

    def throttled(self) -> list[float]:
        return [cap.throttled_seconds() for cap in self.caps]

    def lift(self) -> None:
        for cap in self.caps:
            cap.lift()

    def stop(self) -> None:
        for server in self.servers:
            server.stop()
        for cap in self.caps:
            cap.remove()
        try:
            import pika
            conn = pika.BlockingConnection(pika.URLParameters(AMQP_URL))
            channel = conn.channel()
            for node_id in self.node_ids:
                channel.queue_delete(f"pushengine.node.{node_id}")
            channel.exchange_delete(self.exchange)
            conn.close()
        except Exception as e:      # the queues expire by themselves
            print(f"  (could not delete {self.exchange}: {e})", file=sys.stderr)


def run_mode(mode: str, nodes: int, args: argparse.Namespace,
             views_file: str) -> dict[str, Any]:
    import pika
    cluster = Cluster(mode, nodes, args.users, views_file, args.node_cpu)
    published: dict[int, list[int]] = {u: [] for u in cluster.users}
    steps = []
    try:
        cluster.start()
        conn = pika.BlockingConnection(pika.URLParameters(AMQP_URL))
        channel = conn.channel()
        rng = random.Random(7)
        next_id = 1
        pids = [s.proc.pid for s in cluster.servers if s.proc is not None]
        # what the nodes spend with no change at all (timers, the broker's
        # heartbeats), to tell it apart from the cost of the changes
        idle_cpu = [cpu_seconds(p) for p in pids]
        time.sleep(args.seconds)
        idle = [100 * (cpu_seconds(p) - c) / args.seconds for p, c in zip(pids, idle_cpu)]
        for rate in args.rates:
            before_cpu = [cpu_seconds(p) for p in pids]
            before_throttled = cluster.throttled()
            before = [applied(s) for s in cluster.servers]
            count = int(rate * args.seconds)
            expected = [0] * len(cluster.servers)
            start = time.monotonic()
            for i in range(count):
                user = rng.choice(cluster.users)
                obj = {"id": next_id, "user_id": user, "public": True, "created_at": next_id}
                published[user].append(next_id)
                next_id += 1
                key = routing_key("Stream", [pin(user)]) if mode == "interest" else ""
                body = json.dumps([{"type": "Stream", "action": "upsert", "obj": obj}])
                channel.basic_publish(cluster.exchange, key, body.encode(),
                                      pika.BasicProperties(content_type="application/json"))
                for n in range(len(cluster.servers)):
                    if mode == "fanout" or user % len(cluster.servers) == n:
                        expected[n] += 1
                pause = start + (i + 1) / rate - time.monotonic()
                if pause > 0:
                    time.sleep(pause)
            sent = time.monotonic() - start
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                done = [applied(s) - b for s, b in zip(cluster.servers, before)]
                if all(d >= e for d, e in zip(done, expected)):
                    break
                time.sleep(0.05)
            took = time.monotonic() - start
            cpu = [cpu_seconds(p) - c for p, c in zip(pids, before_cpu)]
            total_applied = sum(done)
            steps.append({
                "rate": rate, "published": count, "publish_rate": count / sent,
                "taken_rate": count / took,
                "cluster_rate": total_applied / took, "seconds": took,
                "throttled_s": [t - b for t, b in zip(cluster.throttled(), before_throttled)],
                "applied": done, "expected": expected,
                "cpu_pct": [100 * c / took for c in cpu],
                "cpu_us_per_published": [1e6 * c / count for c in cpu],
                "net_cpu_us_per_published": [1e6 * max(0.0, c - i / 100 * took) / count
                                             for c, i in zip(cpu, idle)],
            })
        conn.close()
        cluster.lift()
        lost = duplicated = extra = 0
        for user, (server, sid) in cluster.sessions.items():
            events = rpc(server.url, "session.get_events", sid, 0)
            seen = Counter(e["obj"]["id"] for e in events if e.get("action") == "insert")
            want = set(published[user])
            lost += len(want - set(seen))
            duplicated += sum(n - 1 for i, n in seen.items() if n > 1)
            extra += sum(n for i, n in seen.items() if i not in want)
        return {"mode": mode, "nodes": nodes, "node_cpu": args.node_cpu, "steps": steps,
                "exchange": cluster.exchange,
                "queues": [f"pushengine.node.{node_id}" for node_id in cluster.node_ids], "idle_cpu_pct": idle, "lost": lost, "duplicated": duplicated,
                "foreign": extra, "events_expected": sum(len(v) for v in published.values())}
    finally:
        cluster.stop()


def report(result: dict[str, Any]) -> None:
    idle = " ".join(f"{c:.1f}" for c in result["idle_cpu_pct"])
    cap = "" if result["node_cpu"] is None else f", each capped at {result['node_cpu']:g} % of a core"
    print(f"\n{result['mode']}, {result['nodes']} node(s){cap}: "
          f"lost {result['lost']}, duplicated {result['duplicated']}, "
          f"foreign {result['foreign']} of {result['events_expected']} events; "
          f"idle CPU % per node {idle}")
    print(f"{'rate':>6} {'published/s':>12} {'taken/s':>8} {'applied/s':>10} {'s':>5}  "
          f"{'CPU % per node':<28} {'CPU us per published change, per node (less idle)'}")
    for s in result["steps"]:
        cpu = " ".join(f"{c:5.1f}" for c in s["cpu_pct"])
        per = " ".join(f"{c:4.0f} ({n:3.0f})" for c, n in
                       zip(s["cpu_us_per_published"], s["net_cpu_us_per_published"]))
        print(f"{s['rate']:>6} {s['publish_rate']:>12.0f} {s['taken_rate']:>8.0f} "
              f"{s['cluster_rate']:>10.0f} {s['seconds']:>5.1f}  {cpu:<28} {per}")


def summary(results: list[dict[str, Any]]) -> None:
    """The highest rate each cluster took, by mode and size, and its ratio to
    the same mode on the fewest nodes."""
    print("\nhighest rate taken (changes/s), and its ratio to the same mode on the fewest nodes:")
    first: dict[str, float] = {}
    for result in results:
        best = max(s["taken_rate"] for s in result["steps"])
        base = first.setdefault(result["mode"], best)
        print(f"  {result['mode']:<9} {result['nodes']} node(s): {best:8.0f}  x{best / base:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", default="4",
                        help="the cluster's size, or several: 1,2,4")
    parser.add_argument("--users", type=int, default=400)
    parser.add_argument("--rates", default="100,200,400")
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--modes", default="fanout,interest")
    parser.add_argument("--node-cpu", type=float, default=None, metavar="PERCENT",
                        help="cap each node at this share of one core (needs root)")
    parser.add_argument("--json", help="write the results to this file")
    args = parser.parse_args()
    args.rates = [int(r) for r in args.rates.split(",")]
    args.nodes = [int(n) for n in args.nodes.split(",")]
    if args.node_cpu is not None and not args.node_cpu > 0:
        parser.error("--node-cpu must be more than 0")
    total = sum(args.rates) * args.seconds
    if total / args.users > 40:
        parser.error("more than 40 objects per user on average: a view shows 50 at "
                     "most; give more --users or fewer changes")
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(VIEWS, f)
        views_file = f.name
    results = []
    try:
        for nodes in args.nodes:
            for mode in args.modes.split(","):
                result = run_mode(mode, nodes, args, views_file)
                report(result)
                results.append(result)
        if len(args.nodes) > 1 or len(results) > 1:
            summary(results)
    finally:
        os.unlink(views_file)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
