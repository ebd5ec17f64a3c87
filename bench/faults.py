"""Faults under load: what sessions lose, receive twice and wait while a
service the cluster needs goes away and comes back, or a node dies.

    python bench/faults.py [--faults redis,memcached,node,rabbitmq]
                           [--rabbitmq restart|close] [--sessions 1000] [--rate 10]

Per fault, a fresh cluster: two ``twistd -n pushengine`` nodes with
``--amqp`` (an exchange of their own on the RabbitMQ at 127.0.0.1:5672),
``--redis`` and ``--memcache`` on a private Redis and a private memcached that
the script starts on ports of its own, behind haproxy configured from
deploy/haproxy.cfg.in (``balance url_param session``, consistent hashing).

Load: ``--sessions`` long-polling sessions (asyncio, one keep-alive
connection each) are created through the balancer and each subscribes, with
``?session=SID`` on every call as the browser client does, to the view of
one of ``--users`` users (``stream.subscribe_user``, limit 5; each user owns
three streams). A publisher sends ``--rate`` changes a second through the
exchange with pika (persistent messages, publisher confirms; a change whose
confirm did not come is sent again after a reconnect): each change updates one
stream and carries ``n``, the stream's version, and ``sent_at``, the time it
was due. Every session must see every version of every stream of its view,
or a ``reset`` (or a new session's initial state) holding that version or a
later one.

Timeline: ``--pre`` seconds of load, the fault, ``--post`` seconds more
(publishing from the start to the end), then a drain of up to ``--drain``
seconds. Faults (one run each):

- ``rabbitmq``: ``restart`` is ``rabbitmqctl stop_app``, 5 s, ``start_app``
  (the shared broker: every connection to it is cut, other users' too);
  ``close`` is ``rabbitmqctl close_all_connections`` (the broker stays up);
- ``redis``: the private Redis shut down (``SHUTDOWN NOSAVE``, no persistence:
  every session entry is gone) and started again 5 s later;
- ``memcached``: the private memcached killed (SIGKILL) and started again 5 s
  later, empty;
- ``node``: one of the two nodes killed with SIGKILL and started again, same
  port and node id, 20 s later (as a supervisor would); its sessions move to
  the other node and, when it is back, move back.

Reported per fault:

- **lost**: (session, version) pairs never seen, neither as an event nor
  covered by a reset; of them, **superseded**: a later version of the stream
  arrived by an update (the copy converged, but the change itself was not
  delivered);
- **duplicated**: a version received again by an update (not a reset), and
  ``seq`` numbers seen again (``seq_repeats``); ``seq_gaps``: a jump in
  ``seq`` not followed by a reset (a jump with a reset is the documented
  renumbering of a resumed session); updates whose ``old`` is not the
  session's copy of the stream (the contract says it must be);
- latency = receipt of the version (or of the reset covering it) minus
  ``sent_at``; p99 **before** (the changes due in the ``--pre`` window's last
  30 s, received before the fault), **during** (due from the fault until recovery) and **after** (due
  from recovery to the end);
- **recovery**: from the fault to the first second, not before the service
  is back, from which every 5 s window of receipts for the next 10 s has a
  p99 within max(1.5 x, +25 ms) of the pre-fault p99 and a delivery rate of at
  least 80 % of the pre-fault rate;
- what clients saw: resets, HTTP errors (haproxy's 503 when no node is up),
  connection errors, JSON-RPC errors (1001: the session was unknown, and the
  client started a new one);
- lines at error/critical level or with a traceback in the nodes' logs.

Everything runs on 127.0.0.1; the script stops by itself, kills every
process it started, deletes its exchange and the nodes' queues and prints a
table. It needs RabbitMQ, redis-server, memcached and haproxy installed.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import math
import random
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import aiohttp
import orjson
import pika

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.fleet import (EngineNode, PrivateMemcached, PrivateRedis,  # noqa: E402
                         free_port, haproxy_config, log_errors, wait_port)

AMQP_URL = "amqp://guest:guest@127.0.0.1:5672/"
LIMIT = 5
PER_USER = 3
MISMATCHES: list[dict] = []    # the first updates whose ``old`` differed from the copy
DUPLICATES: list[dict] = []    # the first versions received again by an update


# -- the publisher ------------------------------------------------------------------
class Publisher(threading.Thread):
    """``rate`` updates a second into the exchange, each one of the streams
    in turn; every change confirmed is recorded with the time it was due."""

    def __init__(self, exchange: str, users: int, rate: float) -> None:
        super().__init__(daemon=True)
        self.exchange = exchange
        self.rate = rate
        self.objects = {}
        for u in range(1, users + 1):
            for k in range(PER_USER):
                i = (u - 1) * PER_USER + k + 1
                self.objects[i] = {"id": i, "user_id": u, "live": True, "public": True,
                                   "title": f"fault stream {i}", "viewers": 0,
                                   "created_at": f"2026-12-01T00:{i // 60 % 60:02d}:{i % 60:02d}Z",
                                   "n": 0, "sent_at": 0.0}
        self.order = list(self.objects)
        random.Random(5).shuffle(self.order)
        self.published: list[tuple[int, int, int, float]] = []  # (id, user, n, sent_at)
        self.unconfirmed = 0
        self.reconnects = 0
        self.stopping = threading.Event()
        self.started_at = 0.0
        self.connection = None
        self.channel = None

    def connect(self) -> None:
        self.connection = pika.BlockingConnection(pika.URLParameters(
            AMQP_URL + "%2F?connection_attempts=1&socket_timeout=3&blocked_connection_timeout=5"))
        self.channel = self.connection.channel()
        self.channel.confirm_delivery()

    def send(self, changes: list[dict]) -> None:
        body = json.dumps(changes).encode()
        # a unique message id, as every publisher should set: a node drops
        # the broker's second delivery of a message it applied already
        props = pika.BasicProperties(content_type="application/json", delivery_mode=2,
                                     message_id=uuid.uuid4().hex)
        self.channel.basic_publish(self.exchange, "", body, props)

    def seed(self) -> None:
        self.connect()
        self.send([{"type": "Stream", "action": "upsert", "obj": o}
                   for o in self.objects.values()])

    def run(self) -> None:
        self.started_at = time.time()
        k = 0
        pending: list[tuple[dict, float]] = []
        while not self.stopping.is_set():
            due = self.started_at + k / self.rate
            wait = due - time.time()
            if wait > 0:
                self.stopping.wait(wait)
                if self.stopping.is_set():
                    break
            obj = dict(self.objects[self.order[k % len(self.order)]])
            obj["n"] += 1
            obj["viewers"] = obj["n"]
            obj["sent_at"] = due
            self.objects[obj["id"]] = obj
            pending.append((obj, due))
            k += 1
            while pending and not self.stopping.is_set():
                try:
                    if self.channel is None:
                        self.connect()
                        self.reconnects += 1
                    obj0, due0 = pending[0]
                    self.send([{"type": "Stream", "action": "upsert", "obj": obj0}])
                    pending.pop(0)
                    self.published.append((obj0["id"], obj0["user_id"], obj0["n"], due0))
                except Exception:
                    self.channel = None
                    try:
                        if self.connection is not None:
                            self.connection.close()
                    except Exception:
                        pass
                    self.connection = None
                    self.stopping.wait(0.5)
                    break
        self.unconfirmed = len(pending)
        try:
            if self.connection is not None:
                self.connection.close()
        except Exception:
            pass


# -- the sessions -------------------------------------------------------------------
class Session:
    __slots__ = ("user", "sid", "last", "items", "got", "resets", "seq_repeats", "seq_gaps",
                 "version_dups", "old_mismatch", "http_errors", "transport_errors",
                 "rpc_errors", "renewed")

    def __init__(self, user: int) -> None:
        self.user = user
        self.sid = ""
        self.last = 0
        self.items: dict[int, dict] = {}
        self.got: dict[tuple[int, int], float] = {}
        self.resets: list[tuple[float, dict[int, int]]] = []
        self.seq_repeats = self.seq_gaps = self.version_dups = self.old_mismatch = 0
        self.http_errors: dict[int, int] = {}
        self.transport_errors = 0
        self.rpc_errors: dict[int, int] = {}
        self.renewed = 0

    def take_state(self, state: list[dict], now: float) -> None:
        self.items = {o["id"]: o for o in state}
        self.resets.append((now, {o["id"]: o.get("n", 0) for o in state}))

    def apply(self, events: list[dict], now: float) -> None:
        for e in events:
            seq = e["seq"]
            if seq <= self.last:
                self.seq_repeats += 1
                continue
            action = e["action"]
            if seq > self.last + 1 and action != "reset":
                self.seq_gaps += seq - self.last - 1
            self.last = seq
            obj = e.get("obj")
            if action in ("insert", "update"):
                if action == "update" and self.items.get(obj["id"]) != e.get("old"):
                    self.old_mismatch += 1
                    if len(MISMATCHES) < 8:
                        mine = self.items.get(obj["id"])
                        MISMATCHES.append({
                            "session": self.sid, "seq": seq, "stream": obj["id"],
                            "n": obj.get("n"), "old_n": (e.get("old") or {}).get("n"),
                            "copy_n": None if mine is None else mine.get("n"),
                            "since_reset_s": round(now - self.resets[-1][0], 3)
                            if self.resets else None,
                            "at": now})
                self.items[obj["id"]] = obj
                key = (obj["id"], obj.get("n", 0))
                if key in self.got:
                    self.version_dups += 1
                    if len(DUPLICATES) < 8:
                        DUPLICATES.append({
                            "session": self.sid, "seq": seq, "stream": obj["id"],
                            "n": obj.get("n"), "old_n": (e.get("old") or {}).get("n"),
                            "first_s_ago": round(now - self.got[key], 3), "at": now})
                else:
                    self.got[key] = now
            elif action == "delete":
                self.items.pop(obj["id"], None)
            elif action == "reset":
                self.take_state(obj, now)


class Load:
    def __init__(self, base: str, sessions: int, users: int, poll_timeout: float) -> None:
        self.base = base
        self.sessions = [Session(i % users + 1) for i in range(sessions)]
        self.poll_timeout = poll_timeout
        self.stopping = False
        self.http: aiohttp.ClientSession | None = None

    async def call(self, s: Session | None, method: str, params: list,
                   timeout: float = 20) -> tuple[int, object]:
        """(HTTP status, the decoded answer); raises on a transport error."""
        url = self.base + "/api/jsonrpc" + (f"?session={s.sid}" if s and s.sid else "")
        body = orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
        async with self.http.post(url, data=body, headers={"Content-Type": "application/json"},
                                  timeout=aiohttp.ClientTimeout(total=timeout)) as r:
            raw = await r.read()
            try:
                return r.status, orjson.loads(raw) if raw else None
            except orjson.JSONDecodeError:
                return r.status, raw

    async def open(self, s: Session) -> None:
        """A new session and its subscription, retried until they work."""
        while not self.stopping:
            try:
                s.sid = ""
                status, answer = await self.call(None, "session.create", [])
                if status != 200 or "error" in answer:
                    raise RuntimeError(answer)
                s.sid = answer["result"]
                status, answer = await self.call(s, "stream.subscribe_user",
                                                 [s.sid, s.user, LIMIT])
                if status != 200 or "error" in answer:
                    raise RuntimeError(answer)
                s.last = 0
                s.take_state(answer["result"][1], time.time())
                return
            except Exception:
                s.transport_errors += 1
                await asyncio.sleep(0.5)

    async def poll(self, s: Session) -> None:
        while not self.stopping:
            try:
                status, answer = await self.call(s, "session.get_events",
                                                 [s.sid, self.poll_timeout, s.last],
                                                 timeout=self.poll_timeout + 15)
            except Exception:
                s.transport_errors += 1
                await asyncio.sleep(0.5)
                continue
            if status != 200 or not isinstance(answer, dict):
                s.http_errors[status] = s.http_errors.get(status, 0) + 1
                await asyncio.sleep(0.5)
                continue
            if "error" in answer:
                code = answer["error"].get("code", 0)
                s.rpc_errors[code] = s.rpc_errors.get(code, 0) + 1
                if code == 1001:       # unknown session: start again, as the client does
                    s.renewed += 1
                    await self.open(s)
                else:
                    await asyncio.sleep(0.5)
                continue
            s.apply(answer["result"], time.time())


# -- the figures ----------------------------------------------------------------------
def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def analyse(load: Load, published: list[tuple[int, int, int, float]], t_inject: float,
            t_restored: float, pub_end: float, base_window: float = 30) -> dict:
    by_user: dict[int, list[Session]] = {}
    for s in load.sessions:
        by_user.setdefault(s.user, []).append(s)
    records: list[tuple[float, float, float]] = []   # (received, latency, due)
    lost = superseded = 0
    lost_examples = []
    for oid, user, n, due in published:
        for s in by_user.get(user, []):
            seen = s.got.get((oid, n))
            if seen is None:
                for when, state in s.resets:
                    if state.get(oid, -1) >= n and when >= due - 1:
                        seen = when
                        break
            if seen is None:
                lost += 1
                if any(o == oid and v > n for o, v in s.got):
                    superseded += 1
                if len(lost_examples) < 5:
                    lost_examples.append({"stream": oid, "n": n, "due": round(due - t_inject, 2),
                                          "session": s.sid})
                continue
            records.append((seen, seen - due, due))
    base = [r for r in records if t_inject - base_window <= r[0] < t_inject]
    base_p99 = percentile([r[1] for r in base], 0.99) or 0.0
    base_rate = len(base) / base_window
    limit = max(1.5 * base_p99, base_p99 + 0.025)
    by_second: dict[int, list[float]] = {}
    for received, latency, _ in records:
        by_second.setdefault(int(received), []).append(latency)

    def window_ok(start: int) -> bool:
        lat = [x for sec in range(start, start + 5) for x in by_second.get(sec, [])]
        return (len(lat) >= 0.8 * base_rate * 5
                and (percentile(lat, 0.99) or 0.0) <= limit)
    def settled(first: float) -> float | None:
        for start in range(math.ceil(first), int(pub_end) - 14):
            if all(window_ok(start + k) for k in range(10)):
                return start
        return None
    recovered = settled(max(t_inject, t_restored))
    # the first time the figures were back, even before the service was (a
    # node killed: the other node took its sessions before it was restarted)
    first_back = settled(t_inject)
    cut = recovered if recovered is not None else pub_end
    during = [r[1] for r in records if t_inject <= r[2] < cut]
    after = [r[1] for r in records if cut <= r[2] < pub_end]

    def ms(v: float | None) -> float | None:
        return None if v is None else round(v * 1000, 1)
    sessions = load.sessions
    http_errors: dict[int, int] = {}
    rpc_errors: dict[int, int] = {}
    for s in sessions:
        for k, v in s.http_errors.items():
            http_errors[k] = http_errors.get(k, 0) + v
        for k, v in s.rpc_errors.items():
            rpc_errors[k] = rpc_errors.get(k, 0) + v
    return {
        "expected": sum(len(by_user.get(u, [])) for _, u, _, _ in published),
        "delivered": len(records),
        "lost": lost, "superseded": superseded, "lost_examples": lost_examples,
        "version_duplicates": sum(s.version_dups for s in sessions),
        "seq_repeats": sum(s.seq_repeats for s in sessions),
        "seq_gaps": sum(s.seq_gaps for s in sessions),
        "version_duplicate_examples": [{**m, "at": round(m.pop("at") - t_inject, 2)}
                                       for m in DUPLICATES[:8]],
        "old_mismatches": sum(s.old_mismatch for s in sessions),
        "old_mismatch_examples": [{**m, "at": round(m.pop("at") - t_inject, 2)}
                                  for m in MISMATCHES[:8]],
        "resets": sum(len(s.resets) for s in sessions) - len(sessions),
        "sessions_renewed": sum(s.renewed for s in sessions),
        "sessions_with_reset": sum(1 for s in sessions if len(s.resets) > 1),
        "http_errors": http_errors, "rpc_errors": rpc_errors,
        "transport_errors": sum(s.transport_errors for s in sessions),
        "p50_before_ms": ms(percentile([r[1] for r in base], 0.5)),
        "p99_before_ms": ms(base_p99), "rate_before_per_s": round(base_rate, 1),
        "p99_during_ms": ms(percentile(during, 0.99)), "max_during_ms": ms(max(during, default=None)),
        "p99_after_ms": ms(percentile(after, 0.99)),
        "recovery_s": None if recovered is None else round(recovered - t_inject, 1),
        "fault_window_s": round(t_restored - t_inject, 1),
        "first_back_s": None if first_back is None else round(first_back - t_inject, 1),
    }


# -- one run --------------------------------------------------------------------------
def rabbitmqctl(*args: str) -> None:
    subprocess.run(["rabbitmqctl", *args], check=True, capture_output=True, timeout=120)


def forget_broker_state(exchange: str, queues: list[str]) -> None:
    for attempt in range(20):
        try:
            conn = pika.BlockingConnection(pika.URLParameters(
                AMQP_URL + "%2F?connection_attempts=1&socket_timeout=3"))
        except Exception:
            time.sleep(1)
            continue
        try:
            channel = conn.channel()
            for queue in queues:
                channel.queue_delete(queue=queue)
            channel.exchange_delete(exchange=exchange)
        finally:
            try:
                conn.close()
            except Exception:
                pass
        return


def run_fault(fault: str, a: argparse.Namespace, workdir: Path) -> dict:
    MISMATCHES.clear()
    DUPLICATES.clear()
    tag = uuid.uuid4().hex[:8]
    exchange = f"pushengine.bench.faults.{tag}"
    redis = PrivateRedis(a.redis_port, workdir)
    memcached = PrivateMemcached(a.memcache_port)
    nodes: list[EngineNode] = []
    haproxy = None
    publisher = None
    try:
        redis.start()
        memcached.start()
        common = ["--amqp", AMQP_URL, "--amqp-exchange", exchange,
                  "--redis", redis.url, "--memcache", memcached.address,
                  "--max-timeout", "10", "--session-timeout", "120",
                  "--ping-interval", "3600", "--trusted-proxies", "127.0.0.1/32",
                  "--client-rate", "0", "--max-client-sessions", "0"]
        for i in (1, 2):
            nodes.append(EngineNode(workdir, f"faults-{tag}-n{i}", free_port(), *common))
        for node in nodes:
            node.start()
        for node in nodes:
            node.wait_ready()
        port = free_port()
        config = workdir / "haproxy.cfg"
        config.write_text(haproxy_config(f"127.0.0.1:{port}",
                                         [(n.name, f"127.0.0.1:{n.port}") for n in nodes],
                                         timeout="25s", check_inter="2s"))
        log = open(workdir / "haproxy.log", "wb")
        haproxy = subprocess.Popen(["haproxy", "-f", str(config), "-db"], stdout=log,
                                   stderr=subprocess.STDOUT)
        wait_port(port, 10, "haproxy")
        time.sleep(4.5)     # haproxy's checks pass for both nodes (rise 2, inter 2 s)
        publisher = Publisher(exchange, a.users, a.rate)
        publisher.seed()
        time.sleep(1.0)
        result = asyncio.run(drive(fault, a, f"http://127.0.0.1:{port}", publisher, nodes,
                                   redis, memcached))
        result["node_log_errors"] = log_errors([n.log_text() for n in nodes])
        result["publisher_reconnects"] = publisher.reconnects
        result["not_published"] = publisher.unconfirmed
        return result
    finally:
        if publisher is not None:
            publisher.stopping.set()
        for node in nodes:
            node.stop()
        if haproxy is not None:
            haproxy.kill()
            haproxy.wait(10)
        memcached.kill()
        redis.stop()
        forget_broker_state(exchange, [f"pushengine.node.{n.name}" for n in nodes])


async def drive(fault: str, a: argparse.Namespace, base: str, publisher: Publisher,
                nodes: list[EngineNode], redis: PrivateRedis,
                memcached: PrivateMemcached) -> dict:
    load = Load(base, a.sessions, a.users, a.poll_timeout)
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as http:
        load.http = http
        gate = asyncio.Semaphore(50)

        async def opened(s: Session) -> None:
            async with gate:
                await load.open(s)
        started = time.monotonic()
        await asyncio.gather(*(opened(s) for s in load.sessions))
        setup = time.monotonic() - started
        print(f"  {len(load.sessions)} sessions set up in {setup:.1f} s", flush=True)
        polls = [asyncio.ensure_future(load.poll(s)) for s in load.sessions]
        await asyncio.sleep(1.0)
        publisher.start()
        cpu0, wall0 = time.process_time(), time.monotonic()
        await asyncio.sleep(a.pre)
        victim = nodes[0]
        t_inject = time.time()
        if fault == "rabbitmq" and a.rabbitmq == "restart":
            await asyncio.to_thread(rabbitmqctl, "stop_app")
            await asyncio.sleep(5)
            await asyncio.to_thread(rabbitmqctl, "start_app")
        elif fault == "rabbitmq":
            await asyncio.to_thread(rabbitmqctl, "close_all_connections", "fault test")
        elif fault == "redis":
            await asyncio.to_thread(redis.stop)
            await asyncio.sleep(5)
            await asyncio.to_thread(redis.start)
        elif fault == "memcached":
            await asyncio.to_thread(memcached.kill)
            await asyncio.sleep(5)
            await asyncio.to_thread(memcached.start)
        elif fault == "node":
            await asyncio.to_thread(victim.sigkill)
            await asyncio.sleep(20)
            await asyncio.to_thread(victim.start)
            await asyncio.to_thread(victim.wait_ready)
        elif fault != "none":
            raise ValueError(fault)
        t_restored = time.time()
        print(f"  {fault}: injected, back after {t_restored - t_inject:.1f} s", flush=True)
        await asyncio.sleep(max(0.0, t_inject + a.post - time.time()))
        publisher.stopping.set()
        await asyncio.to_thread(publisher.join, 30)
        pub_end = time.time()
        client_cpu = (time.process_time() - cpu0) / (time.monotonic() - wall0) * 100
        # drain: until every session holds the last version of its streams, or --drain
        last = {}
        for oid, _user, n, _due in publisher.published:
            last[oid] = max(last.get(oid, 0), n)
        deadline = time.monotonic() + a.drain
        while time.monotonic() < deadline:
            if all(s.items.get(oid, {}).get("n") == last.get(oid, 0)
                   for s in load.sessions for oid in s.items):
                break
            await asyncio.sleep(0.5)
        load.stopping = True
        for p in polls:
            p.cancel()
        await asyncio.gather(*polls, return_exceptions=True)
    result = analyse(load, publisher.published, t_inject, t_restored, pub_end,
                     base_window=max(5.0, min(30.0, a.pre - 5)))
    result["setup_s"] = round(setup, 1)
    # this script's own CPU (sessions and publisher: one process) while publishing
    result["client_cpu_pct"] = round(client_cpu, 1)
    result["published"] = len(publisher.published)
    result["converged"] = all(
        {oid: o.get("n") for oid, o in s.items.items()}
        == {oid: last.get(oid, 0) for oid, o in publisher.objects.items() if o["user_id"] == s.user}
        for s in load.sessions)
    return result


def table(results: dict[str, dict], how: dict[str, str]) -> str:
    head = ("| fault | how | lost (superseded) | duplicated (versions / seq) | seq gaps | "
            "update with a wrong `old` | "
            "p99 before | p99 during | p99 after | recovery | resets | client errors | "
            "node log errors |")
    lines = [head, "|" + "---|" * 13]

    def ms(v):
        return "–" if v is None else f"{v:,.0f} ms"
    for fault, r in results.items():
        if "error" in r:
            lines.append(f"| {fault} | {how[fault]} | run failed: {r['error']} |" + " |" * 10)
            continue
        errors = []
        for k, v in sorted(r["http_errors"].items()):
            errors.append(f"HTTP {k} ×{v}")
        for k, v in sorted(r["rpc_errors"].items()):
            errors.append(f"RPC {k} ×{v}")
        if r["transport_errors"]:
            errors.append(f"conn ×{r['transport_errors']}")
        recovery = "not within the run" if r["recovery_s"] is None else f"{r['recovery_s']} s"
        if r.get("first_back_s") is not None and r["first_back_s"] != r["recovery_s"]:
            recovery += f" (first back at {r['first_back_s']} s)"
        lines.append(
            f"| {fault} | {how[fault]} | {r['lost']} of {r['expected']:,} ({r['superseded']}) | "
            f"{r['version_duplicates']} / {r['seq_repeats']} | {r['seq_gaps']} | "
            f"{r['old_mismatches']} | "
            f"{ms(r['p99_before_ms'])} | {ms(r['p99_during_ms'])} | {ms(r['p99_after_ms'])} | "
            f"{recovery} | {r['resets']} ({r['sessions_with_reset']} sessions) | "
            f"{', '.join(errors) or 'none'} | {len(r['node_log_errors'])} |")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--faults", default="redis,memcached,node,rabbitmq",
                   help="comma-separated: rabbitmq, redis, memcached, node (none: no fault)")
    p.add_argument("--rabbitmq", choices=("restart", "close"), default="close",
                   help="restart: stop_app/start_app of the shared broker; close: "
                        "close_all_connections")
    p.add_argument("--sessions", type=int, default=1000)
    p.add_argument("--users", type=int, default=20, help="user views the sessions spread over")
    p.add_argument("--rate", type=float, default=10, help="changes published per second")
    p.add_argument("--poll-timeout", type=float, default=5)
    p.add_argument("--pre", type=float, default=40, help="seconds of load before the fault")
    p.add_argument("--post", type=float, default=80, help="seconds of load from the fault on")
    p.add_argument("--drain", type=float, default=15)
    p.add_argument("--redis-port", type=int, default=6390)
    p.add_argument("--memcache-port", type=int, default=11290)
    p.add_argument("--json-out")
    a = p.parse_args()
    how = {"rabbitmq": ("`rabbitmqctl stop_app`, 5 s, `start_app`" if a.rabbitmq == "restart"
                        else "`rabbitmqctl close_all_connections`"),
           "redis": "private Redis shut down, started 5 s later (empty)",
           "memcached": "private memcached SIGKILLed, started 5 s later (empty)",
           "node": "SIGKILL one of two nodes, started again 20 s later",
           "none": "no fault"}
    results: dict[str, dict] = {}
    for fault in a.faults.split(","):
        print(f"{time.strftime('%H:%M:%S')} fault {fault}: {a.sessions} sessions, "
              f"{a.rate:g} changes/s", flush=True)
        with tempfile.TemporaryDirectory(prefix="pushengine-faults-") as tmp:
            try:
                results[fault] = run_fault(fault, a, Path(tmp))
            except Exception as e:
                results[fault] = {"error": repr(e)[:300]}
        r = results[fault]
        print("  " + json.dumps({k: v for k, v in r.items() if k != "node_log_errors"}),
              flush=True)
        for line in r.get("node_log_errors", [])[:20]:
            print("  node log:", line[:300])
    print()
    print(table(results, how))
    if a.json_out:
        Path(a.json_out).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
