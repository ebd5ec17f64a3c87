"""A soak: mixed load on one node for a given time; does its memory stay flat,
and does it log any error?

    python bench/soak.py [--minutes 30] [--longpoll 300] [--sse 150] [--ws 150]
                         [--rate 40] [--redis-port 6391] [--memcache-port 11291]

One ``twistd -n pushengine`` node with ``--redis`` and ``--memcache`` on a
private Redis and a private memcached that the script starts on ports of its
own (and stops at the end). Against it, for ``--minutes``:

- long-poll sessions (``session.get_events`` with ``ack``), SSE streams
  (``GET /api/events``) and WebSockets (``GET /api/ws``), each subscribed to
  the public live view or to one user's view;
- a publisher: ``--rate`` changes a second through ``POST /api/publish``
  (updates of the streams, now and then a new stream or a deletion, so the
  number of objects stays about the same);
- churn: every few seconds some sessions unsubscribe a view and subscribe
  another, some are destroyed and replaced by new ones, some streams are
  closed and opened again (SSE with ``last_event_id``, WebSocket with
  ``session.attach``);
- a segment upload (5,000 contacts) every two minutes, over three names.

Every 10 s the node's RSS and CPU are read from ``/proc``. At the end: RSS at
the start of the load and at the end, its slope over the second half (least
squares, MB per hour), the node's mean CPU, the client-side errors and every
line of the node's log at error or critical level or holding a traceback.
The script stops by itself and kills what it started.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.fleet import (EngineNode, PrivateMemcached, PrivateRedis,  # noqa: E402
                         cpu_seconds, free_port, log_errors, rss_mb)

USERS = 30


def slope_per_hour(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, MB), in MB per hour."""
    if len(points) < 2:
        return 0.0
    n = len(points)
    mx = sum(p[0] for p in points) / n
    my = sum(p[1] for p in points) / n
    sxx = sum((p[0] - mx) ** 2 for p in points)
    sxy = sum((p[0] - mx) * (p[1] - my) for p in points)
    return sxy / sxx * 3600 if sxx else 0.0


class Soak:
    def __init__(self, base: str, args: argparse.Namespace) -> None:
        self.base = base
        self.a = args
        self.rand = random.Random(11)
        self.end = 0.0
        self.errors: dict[str, int] = {}
        self.error_samples: list[str] = []
        self.counts = {"events": 0, "polls": 0, "publishes": 0, "changes": 0,
                       "subscribes": 0, "unsubscribes": 0, "sessions_created": 0,
                       "sessions_destroyed": 0, "reconnects": 0, "uploads": 0,
                       "seq_repeats": 0, "resets": 0}
        self.objects: dict[int, dict] = {}
        self.next_id = 1
        self.http: aiohttp.ClientSession | None = None

    def error(self, kind: str, detail: str = "") -> None:
        self.errors[kind] = self.errors.get(kind, 0) + 1
        if len(self.error_samples) < 20:
            self.error_samples.append(f"{kind}: {detail}"[:300])

    def running(self) -> bool:
        return time.monotonic() < self.end

    # -- JSON-RPC over HTTP ----------------------------------------------------------
    async def rpc(self, method: str, *params, timeout: float = 30):
        body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": list(params)}
        async with self.http.post(self.base + "/api/jsonrpc", json=body,
                                  timeout=aiohttp.ClientTimeout(total=timeout)) as r:
            answer = await r.json(content_type=None)
            if r.status != 200 or "error" in answer:
                raise RuntimeError(f"{method}: HTTP {r.status} {answer}")
            return answer["result"]

    def view(self) -> tuple[str, list]:
        if self.rand.random() < 0.5:
            return "stream.subscribe_public_live", [10]
        return "stream.subscribe_user", [self.rand.randint(1, USERS), 5]

    # -- the publisher --------------------------------------------------------------
    def change(self) -> dict:
        r = self.rand
        if len(self.objects) > 250 and r.random() < 0.05:
            obj = self.objects.pop(r.choice(list(self.objects)))
            return {"type": "Stream", "action": "delete", "obj": {"id": obj["id"]}}
        if self.objects and (len(self.objects) > 300 or r.random() < 0.9):
            obj = dict(self.objects[r.choice(list(self.objects))])
            obj["viewers"] += 1
            obj["live"] = r.random() < 0.8
        else:
            i = self.next_id
            self.next_id += 1
            obj = {"id": i, "user_id": r.randint(1, USERS), "live": True, "public": True,
                   "title": f"soak stream {i}", "viewers": 0,
                   "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        self.objects[obj["id"]] = obj
        return {"type": "Stream", "action": "upsert", "obj": obj}

    async def publisher(self) -> None:
        interval = 0.1
        per_tick = self.a.rate * interval
        owed = 0.0
        nxt = time.monotonic()
        while self.running():
            owed += per_tick
            changes = [self.change() for _ in range(int(owed))]
            owed -= len(changes)
            if changes:
                try:
                    async with self.http.post(self.base + "/api/publish", json=changes,
                                              timeout=aiohttp.ClientTimeout(total=30)) as r:
                        await r.read()
                        if r.status != 200:
                            self.error("publish", f"HTTP {r.status}")
                        else:
                            self.counts["publishes"] += 1
                            self.counts["changes"] += len(changes)
                except Exception as e:
                    self.error("publish", repr(e))
            nxt += interval
            await asyncio.sleep(max(0.0, nxt - time.monotonic()))

    # -- sessions ---------------------------------------------------------------------
    async def new_session(self) -> tuple[str, list[str]]:
        sid = await self.rpc("session.create")
        self.counts["sessions_created"] += 1
        keys = []
        for _ in range(self.rand.choice((1, 1, 2))):
            method, params = self.view()
            key, _state = await self.rpc(method, sid, *params)
            self.counts["subscribes"] += 1
            if key not in keys:     # the same view twice is one subscription
                keys.append(key)
        return sid, keys

    async def churn(self, sid: str, keys: list[str]) -> None:
        """Unsubscribe one view and subscribe another."""
        if keys:
            key = keys.pop(self.rand.randrange(len(keys)))
            await self.rpc("session.unsubscribe", sid, key)
            self.counts["unsubscribes"] += 1
        method, params = self.view()
        key, _state = await self.rpc(method, sid, *params)
        self.counts["subscribes"] += 1
        if key not in keys:
            keys.append(key)

    def take(self, events: list[dict], last: list[int]) -> None:
        for e in events:
            seq = e.get("seq", 0)
            if seq <= last[0]:
                self.counts["seq_repeats"] += 1
            last[0] = max(last[0], seq)
            if e.get("action") == "reset":
                self.counts["resets"] += 1
            self.counts["events"] += 1

    async def lives(self, kind: str, live) -> None:
        """Sessions one after another, each living one to ten minutes:
        ``live(sid, keys, last, life)`` receives its events until ``life``
        (a monotonic time); then the session is destroyed. An error is
        counted under ``kind`` and the next session starts a second later."""
        while self.running():
            try:
                sid, keys = await self.new_session()
                last = [0]
                life = time.monotonic() + self.rand.uniform(60, 600)
                await live(sid, keys, last, life)
                if self.running():
                    await self.rpc("session.destroy", sid)
                    self.counts["sessions_destroyed"] += 1
            except Exception as e:
                if self.running():
                    self.error(kind, repr(e))
                    await asyncio.sleep(1)

    async def longpoll(self) -> None:
        async def live(sid: str, keys: list, last: list, life: float) -> None:
            while self.running() and time.monotonic() < life:
                events = await self.rpc("session.get_events", sid, 15, last[0], timeout=40)
                self.counts["polls"] += 1
                self.take(events, last)
                if self.rand.random() < 0.03:
                    await self.churn(sid, keys)
        await self.lives("longpoll", live)

    async def sse(self) -> None:
        async def live(sid: str, keys: list, last: list, life: float) -> None:
            while self.running() and time.monotonic() < life:
                # held for a while, then closed and opened again with last_event_id
                hold = self.rand.uniform(20, 90)
                url = f"{self.base}/api/events?session={sid}&last_event_id={last[0]}"
                async with self.http.get(url, timeout=aiohttp.ClientTimeout(
                        total=None, sock_read=40)) as r:
                    if r.status != 200:
                        raise RuntimeError(f"SSE HTTP {r.status}: {await r.text()}")
                    until = min(time.monotonic() + hold, self.end)
                    while time.monotonic() < until:
                        try:
                            line = await asyncio.wait_for(
                                r.content.readline(), max(0.1, until - time.monotonic()))
                        except asyncio.TimeoutError:
                            break
                        if not line:
                            if self.running():
                                self.error("sse", "the stream ended")
                            break
                        if line.startswith(b"data: "):
                            self.take([json.loads(line[6:])], last)
                if self.running():
                    self.counts["reconnects"] += 1
                    if self.rand.random() < 0.3:
                        await self.churn(sid, keys)
        await self.lives("sse", live)

    async def ws(self) -> None:
        while self.running():
            sid = None
            last = [0]
            try:
                life = time.monotonic() + self.rand.uniform(60, 600)
                while self.running() and time.monotonic() < life:
                    hold = self.rand.uniform(20, 90)
                    async with self.http.ws_connect(self.base.replace("http", "ws") + "/api/ws",
                                                    autoping=True, max_msg_size=0) as sock:
                        ids = iter(range(1, 10**9))
                        pending: dict[int, asyncio.Future] = {}

                        async def call(method: str, *params):
                            i = next(ids)
                            fut = asyncio.get_running_loop().create_future()
                            pending[i] = fut
                            await sock.send_str(json.dumps({"jsonrpc": "2.0", "id": i,
                                                            "method": method,
                                                            "params": list(params)}))
                            answer = await asyncio.wait_for(fut, 30)
                            if "error" in answer:
                                raise RuntimeError(f"{method} on a socket: {answer['error']}")
                            return answer["result"]

                        async def reader() -> None:
                            async for msg in sock:
                                if msg.type != aiohttp.WSMsgType.TEXT:
                                    continue
                                data = json.loads(msg.data)
                                if data.get("method") == "events":
                                    self.take(data["params"], last)
                                elif "id" in data and data["id"] in pending:
                                    pending.pop(data["id"]).set_result(data)
                            if self.running() and time.monotonic() < until:
                                self.error("ws", f"the socket closed ({sock.close_code})")
                        until = min(time.monotonic() + hold, self.end)
                        task = asyncio.ensure_future(reader())
                        try:
                            if sid is None:
                                sid = await call("session.create")
                                self.counts["sessions_created"] += 1
                                method, params = self.view()
                                await call(method, sid, *params)
                                self.counts["subscribes"] += 1
                            else:
                                await call("session.attach", sid, last[0])
                                self.counts["reconnects"] += 1
                            await asyncio.wait([task], timeout=max(0.0, until - time.monotonic()))
                        finally:
                            task.cancel()
                if sid is not None and self.running():
                    await self.rpc("session.destroy", sid)
                    self.counts["sessions_destroyed"] += 1
            except Exception as e:
                if self.running():
                    self.error("ws", repr(e))
                    await asyncio.sleep(1)

    async def uploads(self) -> None:
        k = 0
        while self.running():
            await asyncio.sleep(120 if k else 30)
            if not self.running():
                break
            rows = ["phone,email"] + [f"+7999{k % 10}{i:06d},user{i}.{k}@example.com"
                                      for i in range(5000)]
            try:
                async with self.http.post(f"{self.base}/api/segments/soak-{k % 3}",
                                          data="\n".join(rows).encode(),
                                          timeout=aiohttp.ClientTimeout(total=120)) as r:
                    body = await r.text()
                    if r.status != 200:
                        self.error("upload", f"HTTP {r.status} {body[:200]}")
                    else:
                        self.counts["uploads"] += 1
            except Exception as e:
                self.error("upload", repr(e))
            k += 1


async def run(a: argparse.Namespace, node: EngineNode) -> dict:
    soak = Soak(f"http://127.0.0.1:{node.port}", a)
    pid = node.process.pid
    samples: list[tuple[float, float, float]] = []   # (seconds, RSS MB, CPU %)
    connector = aiohttp.TCPConnector(limit=0, force_close=False)
    async with aiohttp.ClientSession(connector=connector) as http:
        soak.http = http
        # the first objects, then the clients
        await soak.rpc("session.create")
        first = [soak.change() for _ in range(200)]
        async with http.post(soak.base + "/api/publish", json=first) as r:
            await r.read()
        started = time.monotonic()
        soak.end = started + a.minutes * 60
        tasks = [asyncio.ensure_future(soak.publisher()), asyncio.ensure_future(soak.uploads())]
        for i in range(a.longpoll):
            tasks.append(asyncio.ensure_future(soak.longpoll()))
        for i in range(a.sse):
            tasks.append(asyncio.ensure_future(soak.sse()))
        for i in range(a.ws):
            tasks.append(asyncio.ensure_future(soak.ws()))
        cpu0, t0 = cpu_seconds(pid), time.monotonic()
        while soak.running():
            await asyncio.sleep(min(10.0, max(0.0, soak.end - time.monotonic())))
            if node.process.poll() is not None:
                soak.error("node", f"the node exited with {node.process.returncode}")
                break
            cpu1, t1 = cpu_seconds(pid), time.monotonic()
            samples.append((t1 - started, rss_mb(pid), (cpu1 - cpu0) / (t1 - t0) * 100))
            cpu0, t0 = cpu1, t1
            if len(samples) % 6 == 0:
                s = samples[-1]
                print(f"{s[0] / 60:5.1f} min  RSS {s[1]:6.1f} MB  CPU {s[2]:5.1f} %  "
                      f"events {soak.counts['events']:,}  changes {soak.counts['changes']:,}  "
                      f"client errors {sum(soak.errors.values())}", flush=True)
        soak.end = 0.0
        await asyncio.wait(tasks, timeout=60)
        for t in tasks:
            t.cancel()
    return {"samples": samples, "counts": soak.counts, "client_errors": soak.errors,
            "client_error_samples": soak.error_samples}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--minutes", type=float, default=30)
    p.add_argument("--longpoll", type=int, default=300)
    p.add_argument("--sse", type=int, default=150)
    p.add_argument("--ws", type=int, default=150)
    p.add_argument("--rate", type=float, default=40, help="changes published per second")
    p.add_argument("--redis-port", type=int, default=6391)
    p.add_argument("--memcache-port", type=int, default=11291)
    p.add_argument("--json-out", help="write the samples and figures here")
    a = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="pushengine-soak-") as tmp:
        workdir = Path(tmp)
        redis = PrivateRedis(a.redis_port, workdir)
        memcached = PrivateMemcached(a.memcache_port)
        node = EngineNode(workdir, f"soak-{free_port()}", free_port(),
                          "--redis", redis.url, "--memcache", memcached.address,
                          "--client-rate", "0", "--max-client-sessions", "0")
        try:
            redis.start()
            memcached.start()
            node.start()
            node.wait_ready()
            result = asyncio.run(run(a, node))
            errors = log_errors([node.log_text()])
        finally:
            node.stop()
            memcached.kill()
            redis.stop()
    samples = result["samples"]
    if not samples:
        raise SystemExit("no samples")
    half = [(t, rss) for t, rss, _ in samples if t >= samples[-1][0] / 2]
    figures = {
        "minutes": round(samples[-1][0] / 60, 1),
        "rss_start_mb": round(samples[0][1], 1), "rss_end_mb": round(samples[-1][1], 1),
        "rss_max_mb": round(max(s[1] for s in samples), 1),
        "rss_slope_second_half_mb_per_h": round(slope_per_hour(half), 2),
        "rss_slope_all_mb_per_h": round(slope_per_hour([(t, r) for t, r, _ in samples]), 2),
        "cpu_mean_pct": round(sum(s[2] for s in samples) / len(samples), 1),
        "cpu_max_pct": round(max(s[2] for s in samples), 1),
        "log_error_lines": len(errors),
    }
    print()
    print("minute   RSS MB   CPU %")
    for t, rss, cpu in samples[5::6]:
        print(f"{t / 60:6.1f}  {rss:7.1f}  {cpu:6.1f}")
    print()
    for k, v in figures.items():
        print(f"{k:36s} {v}")
    print("counts:", json.dumps(result["counts"]))
    print("client errors:", json.dumps(result["client_errors"]) or "none")
    for line in result["client_error_samples"]:
        print("   ", line)
    print(f"node log: {len(errors)} line(s) at error/critical level or with a traceback")
    for line in errors[:30]:
        print("   ", line[:300])
    if a.json_out:
        Path(a.json_out).write_text(json.dumps({**result, "figures": figures,
                                                "log_errors": errors}, indent=1))


if __name__ == "__main__":
    main()
