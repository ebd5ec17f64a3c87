"""Counter increments per second from one node over one memcached connection.

Starts its own memcached on a free port (or uses --server host:port) and
measures, over one MemcacheClient connection:

- sequential: each incr waits for the previous answer (one round trip each);
- AtomicCounter sequential: the same through the structure (add-then-incr);
- pipelined window: up to W increments in flight at once;
- pipelined all: every increment sent at once;
- reads of K counters: K sequential gets vs one get_multi per K counters;
- the in-process backend, for scale.

Usage: python bench/memcache_counters.py [-n 20000] [--window 100] [--server host:port]
"""
from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from twisted.internet import defer, task  # noqa: E402

from pushengine.memcache import AtomicCounter, InMemoryCache, MemcacheClient  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_memcached() -> tuple[subprocess.Popen, str]:
    binary = shutil.which("memcached")
    if binary is None:
        sys.exit("memcached is not installed")
    port = free_port()
    args = [binary, "-p", str(port), "-l", "127.0.0.1", "-U", "0"]
    if os.geteuid() == 0:
        args += ["-u", "root"]
    process = subprocess.Popen(args)
    deadline = time.monotonic() + 10
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            if time.monotonic() > deadline:
                process.kill()
                sys.exit("memcached did not start")
            time.sleep(0.01)
    return process, f"127.0.0.1:{port}"


async def timed(label: str, ops: int, run, rows: list) -> None:
    started = time.perf_counter()
    await run()
    seconds = time.perf_counter() - started
    rows.append((label, ops, seconds, ops / seconds))


async def windowed(n: int, window: int, call) -> None:
    """Keep ``window`` calls in flight until ``n`` are done."""
    sem = defer.DeferredSemaphore(window)
    await defer.gatherResults([sem.run(call) for _ in range(n)])


async def bench(reactor, args) -> None:
    process = None
    server = args.server
    if server is None:
        process, server = start_memcached()
    client = MemcacheClient(reactor, [server], timeout=10)
    client.startService()
    rows: list = []
    n, k = args.n, args.keys
    try:
        await client.flush_all()
        await client.set("c", b"0")

        async def sequential():
            for _ in range(n):
                await client.incr("c")

        async def atomic():
            counter = AtomicCounter(client, "atomic")
            for _ in range(n):
                await counter.incr()

        await timed("incr, sequential", n, sequential, rows)
        await timed("AtomicCounter.incr, sequential", n, atomic, rows)
        await timed(f"incr, {args.window} in flight", n, lambda: windowed(n, args.window, lambda: client.incr("c")), rows)
        await timed("incr, all sent at once", n, lambda: defer.gatherResults([client.incr("c") for _ in range(n)]), rows)
        # nothing lost: three runs of n on "c", one on "atomic"
        assert int(await client.get("c")) == 3 * n
        assert int(await client.get("atomic")) == n

        keys = [f"counter:{i}" for i in range(k)]
        for key in keys:
            await client.set(key, b"1")
        rounds = max(1, n // k)

        async def gets():
            for _ in range(rounds):
                for key in keys:
                    await client.get(key)

        async def multi():
            for _ in range(rounds):
                await client.get_multi(keys)

        await timed(f"read {k} counters, sequential get", rounds * k, gets, rows)
        await timed(f"read {k} counters, one get_multi", rounds * k, multi, rows)

        memory = InMemoryCache(reactor)
        await memory.set("c", b"0")

        async def in_process():
            for _ in range(n):
                await memory.incr("c")

        await timed("in-process backend incr, sequential", n, in_process, rows)
    finally:
        await client.stopService()
        if process is not None:
            process.kill()
            process.wait()

    width = max(len(r[0]) for r in rows)
    print(f"{'scenario':<{width}}  {'ops':>7}  {'seconds':>8}  {'ops/s':>9}")
    for label, ops, seconds, rate in rows:
        print(f"{label:<{width}}  {ops:>7}  {seconds:>8.3f}  {rate:>9.0f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=20000, help="increments per scenario")
    parser.add_argument("--window", type=int, default=100, help="increments in flight")
    parser.add_argument("--keys", type=int, default=100, help="counters read per batch")
    parser.add_argument("--server", help="host:port of a running memcached (default: start one)")
    args = parser.parse_args()
    task.react(lambda reactor: defer.Deferred.fromCoroutine(bench(reactor, args)))


if __name__ == "__main__":
    main()
