"""The relay's throughput: row changes per second from commit to broker
confirm, with one ``pushengine-cdc`` process, and its CPU per change.

A private PostgreSQL cluster (tests/pgcluster.py) and a throw-away fanout
exchange with one queue on the local RabbitMQ; the relay runs as its console
script (``python -m pushengine.app.cdc``) with ``--port`` for its figures.
Two measures:

- **live**: this process inserts ``--rows`` rows in transactions of
  ``--batch`` rows (psycopg2 ``execute_values``) while the relay runs; the
  rate is the rows divided by the time from the first commit to the broker's
  confirm of the last row (the relay's ``changes`` figure). The client's own
  insert rate is printed beside it: the live rate cannot pass it.
- **backlog**: the relay is stopped, the rows are committed, the relay is
  started again; the rate is the rows divided by the time from its first
  confirmed change to its last: what one relay can take when PostgreSQL has
  the changes waiting.

The relay's CPU (user + system, ``/proc/<pid>/stat``) over the same interval
divided by the rows is its CPU per change.

    python bench/pg_relay.py [--rows 100000] [--batch 1000] [--mode both]
                             [--routing fanout|interest] [--users 1000]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from fleet import cpu_seconds  # noqa: E402

TARGET = 10_000          # row changes per second, commit to broker confirm
BROKER = "amqp://guest:guest@127.0.0.1:5672/"
TABLE = """
CREATE TABLE streams (
    id bigint PRIMARY KEY,
    title text,
    user_id bigint,
    live boolean NOT NULL DEFAULT false,
    public boolean NOT NULL DEFAULT true,
    created_at timestamptz NOT NULL DEFAULT now(),
    viewers integer NOT NULL DEFAULT 0,
    tags text[]
);
ALTER TABLE streams REPLICA IDENTITY FULL;
"""
VIEWS = "types:\n  Stream: {id: id, table: streams, route: [user_id]}\nviews: {}\n"


def free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Relay:
    """One relay process and its figures (/metrics, /health)."""

    def __init__(self, url: str, exchange: str, views: Path, routing: str, log: Path) -> None:
        self.port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("PUSHENGINE_")}
        env["PYTHONPATH"] = str(ROOT)
        self.log = log.open("ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "pushengine.app.cdc", url, "--amqp", BROKER,
             "--amqp-exchange", exchange, "--amqp-routing", routing, "--views", str(views),
             "--slot", "bench_relay", "--port", f"tcp:{self.port}:interface=127.0.0.1"],
            cwd=str(ROOT), env=env, stdout=self.log, stderr=subprocess.STDOUT)

    def get(self, path: str) -> tuple[int, bytes]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=5) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def wait_up(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise SystemExit(f"the relay exited with {self.process.returncode}")
            try:
                if self.get("/health")[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise SystemExit("the relay did not come up")

    def figure(self, name: str) -> float:
        _, text = self.get("/metrics")
        for line in text.decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        raise KeyError(name)

    def changes(self) -> int:
        return int(self.figure("pushengine_cdc_relay_changes_total"))

    def cpu(self) -> float:
        return cpu_seconds(self.process.pid)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        self.log.close()


def insert(url: str, first_id: int, rows: int, batch: int, users: int) -> tuple[float, float]:
    """Insert ``rows`` rows in transactions of ``batch``; (first commit's
    start, last commit's end) as time.monotonic() values."""
    import psycopg2
    from psycopg2.extras import execute_values
    conn = psycopg2.connect(url)
    started = None
    with conn.cursor() as cur:
        for start in range(first_id, first_id + rows, batch):
            end = min(start + batch, first_id + rows)
            values = [(i, f"stream {i} of cats and dogs", 1 + i % users, i % 5 == 0,
                       ["music", "live"] if i % 3 == 0 else None) for i in range(start, end)]
            if started is None:
                started = time.monotonic()
            execute_values(cur, "INSERT INTO streams (id, title, user_id, live, tags) "
                                "VALUES %s", values, page_size=batch)
            conn.commit()
    done = time.monotonic()
    conn.close()
    assert started is not None
    return started, done


def wait_changes(relay: Relay, total: int,
                 timeout: float) -> tuple[float, tuple[float, int] | None]:
    """Poll until the relay has ``total`` confirmed changes; (when it did,
    (when confirmed changes were first seen, how many)), if seen."""
    deadline = time.monotonic() + timeout
    first = None
    while True:
        n = relay.changes()
        now = time.monotonic()
        if n > 0 and first is None:
            first = (now, n)
        if n >= total:
            return now, first
        if now > deadline:
            raise SystemExit(f"the relay confirmed {n:,} of {total:,} changes in {timeout} s")
        if relay.process.poll() is not None:
            raise SystemExit(f"the relay exited with {relay.process.returncode}")
        time.sleep(0.01)


def profile(relay: Relay, path: str | None) -> subprocess.Popen | None:
    """py-spy recording the relay (all threads, without stopping it) for a
    few seconds, into ``path``."""
    if path is None:
        return None
    spy = Path(sys.executable).with_name("py-spy")
    return subprocess.Popen([str(spy), "record", "--pid", str(relay.process.pid),
                             "--duration", "4", "--rate", "200", "--format", "raw",
                             "--threads", "--nonblocking", "--output", path],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def report(label: str, rows: int, seconds: float, cpu: float, extra: str = "") -> dict:
    rate = rows / seconds
    per_change = cpu / rows * 1e6
    print(f"{label:<8} {rows:>9,} changes in {seconds:6.2f} s: {rate:>9,.0f} changes/s "
          f"(target {TARGET:,}/s: x{rate / TARGET:.2f}, {'met' if rate >= TARGET else 'missed'}); "
          f"relay CPU {per_change:.1f} us/change ({cpu / seconds * 100:.0f} % of a core)"
          f"{extra}")
    return {"mode": label, "rows": rows, "seconds": seconds, "rate": rate,
            "cpu_us_per_change": per_change, "cpu_share": cpu / seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=1000, help="rows per transaction")
    parser.add_argument("--mode", choices=("live", "backlog", "both"), default="both")
    parser.add_argument("--routing", choices=("fanout", "interest"), default="fanout")
    parser.add_argument("--users", type=int, default=1000,
                        help="distinct user_id values (the routing key in interest mode)")
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("--json", default=None, help="write the figures to this file")
    parser.add_argument("--profile", default=None, metavar="FILE",
                        help="record the relay with py-spy during the last measure "
                             "(raw format, for flamegraph.pl or speedscope)")
    args = parser.parse_args()

    import pika
    import psycopg2
    from tests.pgcluster import start_cluster

    cluster = start_cluster()
    work = Path(tempfile.mkdtemp(prefix="pe-relay-bench-"))
    views = work / "views.yaml"
    views.write_text(VIEWS)
    exchange = f"bench.relay.{uuid.uuid4().hex[:8]}"
    # (pika's blocking connection would miss its heartbeats during the run:
    # one connection to set up, another to clean up)
    connection = pika.BlockingConnection(pika.URLParameters(BROKER))
    channel = connection.channel()
    channel.exchange_declare(exchange, "topic" if args.routing == "interest" else "fanout",
                             durable=True)
    queue = channel.queue_declare(f"{exchange}.q", arguments={"x-max-length": 1_000_000})
    channel.queue_bind(queue.method.queue, exchange, "#")
    connection.close()
    results = []
    relay: Relay | None = None
    try:
        url = cluster.create_database("bench")
        conn = psycopg2.connect(url)
        conn.autocommit = True
        conn.cursor().execute(TABLE)
        conn.close()
        print(f"{args.rows:,} rows, {args.batch:,} per transaction, routing {args.routing}, "
              f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
        relay = Relay(url, exchange, views, args.routing, work / "relay.log")
        relay.wait_up()
        next_id = 1
        if args.mode in ("live", "both"):
            before_changes = relay.changes()
            cpu0 = relay.cpu()
            times: dict[str, tuple[float, float]] = {}
            worker = threading.Thread(target=lambda: times.setdefault(
                "insert", insert(url, next_id, args.rows, args.batch, args.users)))
            worker.start()
            done, _ = wait_changes(relay, before_changes + args.rows, args.timeout)
            cpu = relay.cpu() - cpu0
            worker.join()
            started, committed = times["insert"]
            next_id += args.rows
            results.append(report("live", args.rows, done - started, cpu,
                                   f"; the client committed at "
                                   f"{args.rows / (committed - started):,.0f} rows/s"))
        if args.mode in ("backlog", "both"):
            relay.stop()
            started, committed = insert(url, next_id, args.rows, args.batch, args.users)
            before = 0
            relay = Relay(url, exchange, views, args.routing, work / "relay.log")
            relay.wait_up()
            spy = profile(relay, args.profile)
            cpu0 = relay.cpu()
            done, first = wait_changes(relay, before + args.rows, args.timeout)
            if spy is not None:
                spy.wait()
            cpu = relay.cpu() - cpu0
            assert first is not None
            # counted from the first confirmed changes seen (the CPU from the
            # start: an upper bound per change)
            seen_at, seen = first
            again = relay.changes() - args.rows
            results.append(report("backlog", args.rows - seen, done - seen_at, cpu,
                                  f"; {again:,} change(s) sent again" if again else ""))
        stats = {line.split()[0]: float(line.split()[1])
                 for line in relay.get("/metrics")[1].decode().splitlines()
                 if line.startswith("pushengine_cdc_relay_")}
        print(f"relay: {stats.get('pushengine_cdc_relay_messages_total', 0):,.0f} messages, "
              f"{stats.get('pushengine_cdc_relay_failures_total', 0):.0f} failures, "
              f"{stats.get('pushengine_cdc_relay_pauses_total', 0):.0f} pauses")
        if args.json:
            Path(args.json).write_text(json.dumps(results, indent=2))
    finally:
        if relay is not None:
            relay.stop()
        try:
            connection = pika.BlockingConnection(pika.URLParameters(BROKER))
            channel = connection.channel()
            channel.queue_delete(f"{exchange}.q")
            channel.exchange_delete(exchange)
            connection.close()
        finally:
            cluster.stop()
        log = work / "relay.log"
        errors = [line for line in log.read_text().splitlines()
                  if "#error" in line or "#critical" in line or "Traceback" in line] \
            if log.exists() else []
        if errors:
            print(f"relay log errors (the log is {log}):\n" + "\n".join(errors[:20]))
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
