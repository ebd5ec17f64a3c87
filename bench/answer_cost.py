"""Python calls and CPU per get_events answer on the fast front, in process, beside another tree.

    python bench/answer_cost.py [--requests 20000] [--polls 2000] [--rounds 3] [--baseline DIR]

Builds a node on a Clock (no sockets, no load generator) and measures two
answers of long-polling, as a keep-alive client sends them — one request
per read, the same head each time:

- *waiting*: ``session.get_events(sid, 0, 0)`` with 10 events waiting
  (``ack`` 0 keeps them queued, so every answer carries them), on 50
  connections in turn (what wrk sends in bench/http_roundtrip.py);
- *woken*: ``--polls`` connections with a poll parked each, one change
  wakes them all (the fan-out path of long-polling); and per poll parked
  again.

For each: CPU microseconds per answer (process time: the machine may be
shared) and Python function calls per answer (cProfile's count, builtins
included, in a separate pass so that the profiler's cost stays out of the CPU
figure). ``--baseline DIR``: the same measurements of another checkout of
the project (e.g. ``git worktree add`` of main), run as alternating
subprocesses, ``--rounds`` times each, medians printed side by side with the
ratio (this tree's figure over the baseline's). Without it, this tree alone.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any, Callable

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from inprocess_http import connect, never_timer, request, subscribed  # noqa: E402

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIGURES = [("waiting_us", "µs CPU per answer, events waiting"),
           ("waiting_calls", "Python calls per answer, events waiting"),
           ("woken_us", "µs CPU per woken poll's answer"),
           ("woken_calls", "Python calls per woken poll's answer"),
           ("park_us", "µs CPU per poll parked again"),
           ("park_calls", "Python calls per poll parked again")]


def _stream(i: int, **extra: Any) -> Any:
    from pushengine.core.changes import Change
    return Change("Stream", "upsert", i, {
        "id": i, "title": f"stream {i}", "user_id": 1, "live": True, "public": True,
        "created_at": f"2026-11-30T00:00:{i:02d}Z", "viewers": i, **extra})


def _counted(run: Callable[[], int]) -> float:
    """Python calls per answer of ``run`` (which returns its answers)."""
    import cProfile
    import pstats
    profile = cProfile.Profile()
    profile.enable()
    answers = run()
    profile.disable()
    return pstats.Stats(profile).total_calls / answers   # type: ignore[attr-defined]


def waiting(requests: int) -> tuple[float, float]:
    """(µs CPU, calls) per answer with events waiting, one request per read."""
    from tests.http.harness import ClockNode
    node = ClockNode("--http", "fast", "--client-rate", "0")
    factory = node.http_factory()
    protocol, transport = connect(factory, 39999)
    protocol.dataReceived(request({"jsonrpc": "2.0", "id": 1, "method": "session.create"}))
    node.clock.advance(0)
    sid = json.loads(transport.value().split(b"\r\n\r\n", 1)[1])["result"]
    protocol.dataReceived(request({"jsonrpc": "2.0", "id": 2,
                                    "method": "stream.subscribe_public_live",
                                    "params": [sid, 50]}))
    node.clock.advance(0)
    node.engine.apply_changes([_stream(i) for i in range(10)])
    one = request({"jsonrpc": "2.0", "id": 1, "method": "session.get_events",
                    "params": [sid, 0, 0]})
    conns = [connect(factory, 40000 + i) for i in range(50)]

    def run(n: int) -> int:
        done = 0
        for _ in range(n // len(conns)):
            for protocol, transport in conns:
                protocol.dataReceived(one)
            node.clock.advance(0)           # the turn ends: the outbox is written
            for protocol, transport in conns:
                out = transport.value()
                assert out.startswith(b"HTTP/1.1 200") and out.count(b"HTTP/1.1") == 1, out[:200]
                transport.clear()
            done += len(conns)
        return done

    run(500)                                # warm: every head read once
    start = time.process_time()
    answers = run(requests)
    cpu = (time.process_time() - start) / answers
    return cpu * 1e6, _counted(lambda: run(min(requests, 2000)))


def woken(polls: int, changes: int = 5) -> tuple[float, float, float, float]:
    """(µs CPU, calls) per woken poll's answer and per poll parked again."""
    from tests.http.harness import ClockNode
    node = ClockNode("--http", "fast", "--client-rate", "0", "--max-client-sessions", "0",
                     "--max-client-connections", "0", "--max-sessions", "0")
    node.clock.callLater = never_timer   # type: ignore[method-assign]
    factory = node.http_factory()
    conns = subscribed(factory, polls)
    state = {"n": 0}

    def park() -> int:
        n = state["n"]
        for (protocol, transport, sid) in conns:
            protocol.dataReceived(request({"jsonrpc": "2.0", "id": 3,
                                            "method": "session.get_events",
                                            "params": [sid, 30, n]}))
        return len(conns)

    def wake() -> int:
        state["n"] += 1
        node.engine.apply_changes([_stream(1, n=state["n"])])
        return len(conns)

    def check() -> None:
        for protocol, transport, sid in conns:
            assert transport.value().count(b"HTTP/1.1 200") == 1, transport.value()[:300]
            transport.clear()

    park_cpu = wake_cpu = 0.0
    for round_ in range(changes + 1):
        start = time.process_time()
        park()
        parked = time.process_time() - start
        for protocol, transport, sid in conns:
            assert not transport.value(), transport.value()[:200]
        start = time.process_time()
        wake()
        answered = time.process_time() - start
        check()
        if round_:                          # the first round reads every head once
            park_cpu += parked
            wake_cpu += answered
    park_calls = _counted(park)
    wake_calls = _counted(wake)
    check()
    return (wake_cpu / (changes * polls) * 1e6, wake_calls,
            park_cpu / (changes * polls) * 1e6, park_calls)


def measure_here(requests: int, polls: int) -> dict[str, float]:
    from pushengine.app.tap import tune_gc
    tune_gc()
    waiting_us, waiting_calls = waiting(requests)
    woken_us, woken_calls, park_us, park_calls = woken(polls)
    return {"waiting_us": waiting_us, "waiting_calls": waiting_calls, "woken_us": woken_us,
            "woken_calls": woken_calls, "park_us": park_us, "park_calls": park_calls}


def measure_tree(tree: str, requests: int, polls: int) -> dict[str, float]:
    """The figures of the checkout at ``tree``, in a process of its own."""
    env = dict(os.environ, PYTHONPATH=tree)
    done = subprocess.run([sys.executable, os.path.abspath(__file__), "--tree", tree,
                           "--requests", str(requests), "--polls", str(polls), "--one"],
                          check=True, capture_output=True, text=True, env=env, cwd=tree)
    figures: dict[str, float] = json.loads(done.stdout.splitlines()[-1])
    return figures


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--requests", type=int, default=20_000)
    p.add_argument("--polls", type=int, default=2_000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--baseline", help="another checkout of the project, measured alike")
    p.add_argument("--tree", default=HERE, help=argparse.SUPPRESS)
    p.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.requests < 50 or a.polls < 1 or a.rounds < 1:
        p.error("--requests must be 50 or more, --polls and --rounds 1 or more")
    if a.one:
        sys.path.insert(0, a.tree)
        import pushengine
        if not os.path.abspath(pushengine.__file__).startswith(os.path.abspath(a.tree)):
            p.error(f"pushengine is imported from {pushengine.__file__}, not from {a.tree}")
        print(json.dumps(measure_here(a.requests, a.polls)))
        return
    trees = {"this tree": HERE}
    if a.baseline:
        trees = {"baseline": os.path.abspath(a.baseline), "this tree": HERE}
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    for _ in range(a.rounds):
        for name, tree in trees.items():    # alternating: drift hits both alike
            runs[name].append(measure_tree(tree, a.requests, a.polls))
    medians = {name: {key: statistics.median(r[key] for r in found) for key, _ in FIGURES}
               for name, found in runs.items()}
    print(f"{a.requests:,} answers with events waiting, {a.polls:,} polls woken per change; "
          f"medians of {a.rounds} rounds")
    for key, label in FIGURES:
        here = medians["this tree"][key]
        if "baseline" in medians:
            base = medians["baseline"][key]
            print(f"{label:42}: baseline {base:8.1f}, this tree {here:8.1f} "
                  f"(×{here / base:.2f})")
        else:
            print(f"{label:42}: {here:8.1f}")


if __name__ == "__main__":
    main()
