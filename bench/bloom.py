"""Scalable Bloom filters: commands per second on both backends, memory per
item against the optimum, and observed false-positive rates.

- add / exists per second, single (one item per command: one after the
  other, and ``--window`` commands in flight) and batched (``madd`` /
  ``mexists`` of ``--batch`` items), in process and in Redis (Lua scripts
  over bitmaps; the server's BF.* commands where it has the module);
- memory per million items at 1 % and 0.1 %: the bits of a non-scaling
  filter (one layer at the whole rate, as RedisBloom's ~9.6 bits/item at
  1 %) and of a scaling one (its first layer at half the rate), beside the
  Bloom optimum ``-ln(p) / ln(2)**2`` and the information-theoretic bound
  ``log2(1/p)``; the Redis string's own MEMORY USAGE;
- observed false-positive rates at 10**5 and 10**6 items (capacity = items,
  and a filter that grew to several layers), on ``--probes`` non-members.

Usage: python bench/bloom.py [--redis redis://127.0.0.1:6379/8] [--quick]
Writes bench/results/bloom.json and prints the tables of docs/benchmarks.md.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from twisted.internet import defer, task  # noqa: E402

from pushengine.bloom.memory import MemoryBloom, ScalableFilter  # noqa: E402
from pushengine.bloom.params import FilterSpec, layer_shape  # noqa: E402

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")


async def rate(n: int, run) -> float:
    start = time.perf_counter()
    await run()
    return n / (time.perf_counter() - start)


async def server_time(bloom) -> tuple[float, int] | None:
    """(microseconds, calls) Redis has spent in EVALSHA so far (None in process)."""
    if not hasattr(bloom, "_send"):
        return None
    text = await bloom._send("INFO", "commandstats")
    for line in str(text).splitlines():
        if line.startswith("cmdstat_evalsha:"):
            fields = dict(f.split("=") for f in line.split(":", 1)[1].split(","))
            return float(fields["usec"]), int(fields["calls"])
    return 0.0, 0


async def throughput(bloom, key: str, n_single: int, n_batch: int, batch: int,
                     window: int) -> dict[str, float]:
    """Items per second for each way of adding and checking."""
    await bloom.reserve(key, 0.01, n_batch + 3 * n_single)
    out: dict[str, float] = {}

    async def sequential(op, prefix):
        for i in range(n_single):
            await getattr(bloom, op)(key, f"{prefix}{i}")

    async def windowed(op, prefix):
        pending = []
        for i in range(n_single):
            pending.append(getattr(bloom, op)(key, f"{prefix}{i}"))
            if len(pending) >= window:
                await defer.gatherResults(pending)
                pending = []
        await defer.gatherResults(pending)

    async def batched(op, prefix):
        for s in range(0, n_batch, batch):
            await getattr(bloom, op)(key, [f"{prefix}{i}" for i in range(s, s + batch)])

    async def batched_window(op, prefix, inflight=4):
        pending = []
        for s in range(0, n_batch, batch):
            pending.append(getattr(bloom, op)(key, [f"{prefix}{i}" for i in range(s, s + batch)]))
            if len(pending) >= inflight:
                await defer.gatherResults(pending)
                pending = []
        await defer.gatherResults(pending)

    out["add, single, one at a time"] = await rate(n_single, lambda: sequential("add", "a"))
    out[f"add, single, {window} in flight"] = await rate(n_single, lambda: windowed("add", "w"))
    before = await server_time(bloom)
    out[f"madd, batches of {batch}"] = await rate(n_batch, lambda: batched("madd", "b"))
    after = await server_time(bloom)
    if before is not None and after is not None and after[1] > before[1]:
        # what Redis itself spends: items per second of its own time
        out[f"madd, batches of {batch}: Redis's own time"] = n_batch / (
            (after[0] - before[0]) / 1e6)
    out[f"madd, batches of {batch}, 4 in flight"] = await rate(
        n_batch, lambda: batched_window("madd", "c"))
    out["exists, single, one at a time"] = await rate(n_single,
                                                      lambda: sequential("exists", "a"))
    out[f"exists, single, {window} in flight"] = await rate(n_single,
                                                            lambda: windowed("exists", "x"))
    out[f"mexists, batches of {batch}"] = await rate(n_batch, lambda: batched("mexists", "b"))
    return out


def memory_table() -> list[dict]:
    rows = []
    for p in (0.01, 0.001):
        optimum = -math.log(p) / math.log(2) ** 2
        bound = math.log2(1 / p)
        for nonscaling in (True, False):
            f = ScalableFilter.create(FilterSpec(p, 1_000_000, 2, nonscaling))
            bits, hashes = layer_shape(-math.log(p), nonscaling, 0, 1_000_000)
            layer_p = p if nonscaling else p / 2
            layer_optimum = -math.log(layer_p) / math.log(2) ** 2
            rows.append({
                "error": p, "filter": "non-scaling" if nonscaling else "scaling (1st layer at p/2)",
                "bytes per million": f.size, "bits per item": f.size * 8 / 1e6,
                "hashes": hashes, "layer optimum bits/item": layer_optimum,
                "vs layer optimum": f.size * 8 / 1e6 / layer_optimum,
                "Bloom optimum at p": optimum, "log2(1/p)": bound,
                "RedisBloom bits/item": 9.6 if (p == 0.01 and nonscaling) else None})
    return rows


async def fp_rates(bloom, name: str, tag: str, probes: int, batch: int,
                   sizes: list[int]) -> list[dict]:
    rows = []
    for n in sizes:
        for p, capacity in ((0.01, n), (0.01, n // 10), (0.001, n)):
            key = f"{tag}:fp:{n}:{p}:{capacity}"
            await bloom.reserve(key, p, capacity)
            start = time.perf_counter()
            for s in range(0, n, batch):
                await bloom.madd(key, [f"m{i}" for i in range(s, min(n, s + batch))])
            fill = time.perf_counter() - start
            positives = 0
            for s in range(0, probes, batch):
                positives += sum(await bloom.mexists(
                    key, [f"n{i}" for i in range(s, min(probes, s + batch))]))
            info = await bloom.info(key)
            rows.append({"backend": name, "items": n, "error": p, "capacity": capacity,
                         "layers": info["Number of filters"],
                         "inserted": info["Number of items inserted"],
                         "bytes": info["Size"], "probes": probes,
                         "observed": positives / probes, "fill seconds": round(fill, 2)})
            print(f"  fp {name} n={n} p={p} capacity={capacity}: "
                  f"{positives / probes:.5f} ({info['Number of filters']} layers)", flush=True)
    return rows


async def redis_string_bytes(url: str, bloom, tag: str) -> dict[str, dict]:
    """MEMORY USAGE of filters' bitmaps in Redis beside their Size: a
    reserved 10**6-item filter, and one grown to 10**6 items from 10**5."""
    async def usage(key: str) -> dict[str, int]:
        info = await bloom.info(key)
        total = 0
        for i in range(info["Number of filters"]):       # one string per layer
            total += int(await bloom._send("MEMORY", "USAGE", f"{bloom._keys(key)[1]}:{i}"))
        return {"size": info["Size"], "memory usage": total}
    out = {}
    for p in (0.01, 0.001):
        key = f"{tag}:mem:{p}"
        await bloom.reserve(key, p, 1_000_000, nonscaling=True)
        out[f"{p}, reserved for 10**6"] = await usage(key)
    key = f"{tag}:mem:grown"
    await bloom.reserve(key, 0.01, 100_000)
    for s in range(0, 1_000_000, 1000):
        await bloom.madd(key, [f"g{i}" for i in range(s, s + 1000)])
    out["0.01, grown from 10**5 to 10**6 (4 layers)"] = await usage(key)
    return out


async def main(reactor, args) -> None:
    results: dict = {"time": time.strftime("%Y-%m-%dT%H:%M:%S"), "batch": args.batch,
                     "window": args.window}
    tag = f"bench-{uuid.uuid4().hex[:8]}"
    n_single, n_batch = (2000, 50_000) if args.quick else (20_000, 300_000)
    sizes = [100_000] if args.quick else [100_000, 1_000_000]
    print("memory per million items", flush=True)
    results["memory"] = memory_table()
    print("in process", flush=True)
    memory = MemoryBloom(reactor)
    results["throughput"] = {"memory": await throughput(
        memory, f"{tag}:t", n_single, n_batch, args.batch, args.window)}
    results["fp"] = [] if args.only else await fp_rates(memory, "memory", tag, args.probes,
                                                           args.batch, sizes)
    del memory
    if args.redis:
        from pushengine.redis.bloom import RedisBloom
        sep = "&" if "?" in args.redis else "?"
        bloom = RedisBloom(reactor, f"{args.redis}{sep}prefix={tag}:&timeout=30")
        bloom.startService()
        for _ in range(200):
            if bloom.available:
                break
            await task.deferLater(reactor, 0.05, lambda: None)
        name = "redis (module)" if bloom.native else "redis (Lua)"
        print(name, flush=True)
        try:
            results["throughput"][name] = await throughput(
                bloom, f"{tag}:t", n_single, n_batch, args.batch, args.window)
            if not args.only:
                results["redis string bytes per million"] = await redis_string_bytes(
                    args.redis, bloom, tag)
                results["fp"] += await fp_rates(bloom, name, tag, args.probes, args.batch,
                                                sizes)
        finally:
            keys = []
            cursor = "0"
            while True:
                cursor, found = await bloom._send("SCAN", cursor, "MATCH", f"{tag}:*",
                                                  "COUNT", 1000)
                keys += found
                if str(cursor) == "0":
                    break
            if keys:
                await bloom._send("DEL", *keys)
            await bloom.stopService()
    os.makedirs(RESULTS, exist_ok=True)
    with open(os.path.join(RESULTS, "bloom-throughput.json" if args.only else "bloom.json"),
              "w") as f:
        json.dump(results, f, indent=2)
    report(results)


def report(results: dict) -> None:
    print("\n| operation | " + " | ".join(results["throughput"]) + " |")
    print("|---|" + "---:|" * len(results["throughput"]))
    names = list(dict.fromkeys(op for t in results["throughput"].values() for op in t))
    for op in names:
        print(f"| {op} | " + " | ".join(f"{t[op]:,.0f}" if op in t else "—"
                                        for t in results["throughput"].values()) + " |")
    print("\n| error | filter | bits/item | hashes | optimum for its layer | ratio | "
          "log2(1/p) | RedisBloom |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for r in results["memory"]:
        print(f"| {r['error']:g} | {r['filter']} | {r['bits per item']:.3f} | {r['hashes']} | "
              f"{r['layer optimum bits/item']:.3f} | {r['vs layer optimum']:.4f} | "
              f"{r['log2(1/p)']:.2f} | {r['RedisBloom bits/item'] or '—'} |")
    if "redis string bytes per million" in results:
        print("\n| Redis bitmap | Size (bits) | MEMORY USAGE | overhead |")
        print("|---|---:|---:|---:|")
        for what, r in results["redis string bytes per million"].items():
            print(f"| {what} | {r['size']:,} | {r['memory usage']:,} | "
                  f"{r['memory usage'] / r['size'] - 1:.1%} |")
    print("\n| backend | items | error | capacity | layers | observed FP | fill s |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in results["fp"]:
        print(f"| {r['backend']} | {r['items']:,} | {r['error']:g} | {r['capacity']:,} | "
              f"{r['layers']} | {r['observed']:.5f} | {r['fill seconds']} |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/8",
                        help="Redis URL ('' to skip Redis)")
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--window", type=int, default=50)
    parser.add_argument("--probes", type=int, default=100_000)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", choices=["throughput"], help="measure only this")
    arguments = parser.parse_args()
    task.react(lambda reactor: defer.ensureDeferred(main(reactor, arguments)))
