"""What /metrics' histograms cost the hot paths, in process: with and without.

    python bench/metrics_cost.py [--requests 20000] [--polls 2000] [--rounds 5]

Builds a node on a Clock (no sockets) whose timings read the real clock
(``time.time``, what the reactor's ``seconds`` is), and measures, each
round once with the histograms on and once with them off (alternating, so
that drift hits both alike):

- *answer*: CPU microseconds per ``session.get_events`` answer with 10
  events waiting, on the fast front, one request per read on 50 keep-alive
  connections (``pushengine_rpc_call_seconds``: one observation per call);
- *event*: CPU microseconds per woken poll's answer when one change wakes
  ``--polls`` parked polls (``pushengine_delivery_seconds``: one
  observation per session delivered to, plus the poll's own call time).

Prints the medians and the difference per answer and per event.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import Any

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from inprocess_http import never_timer, request, subscribed, waiting_answers  # noqa: E402


def _stream(i: int, **extra: Any) -> Any:
    from pushengine.core.changes import Change
    return Change("Stream", "upsert", i, {
        "id": i, "title": f"stream {i}", "user_id": 1, "live": True, "public": True,
        "created_at": f"2026-11-30T00:00:{i:02d}Z", "viewers": i, **extra})


def _node(timed: bool, *argv: str) -> Any:
    from tests.http.harness import ClockNode
    node = ClockNode("--http", "fast", "--client-rate", "0", "--max-client-sessions", "0",
                     "--max-client-connections", "0", "--max-sessions", "0", *argv)
    node.dispatcher.clock = time.time
    if not timed:
        node.dispatcher.timings = None
        node.engine.sessions.delivery_timings = None
    return node


def answers(timed: bool, requests: int) -> float:
    """µs CPU per get_events answer with 10 events waiting."""
    node = _node(timed)
    run = waiting_answers(node, [_stream(i) for i in range(10)])
    run(500)
    start = time.process_time()
    done = run(requests)
    observed = node.call_timings.by_label.get("session.get_events")
    assert (observed is not None and observed.count >= done) == timed
    return (time.process_time() - start) / done * 1e6


def events(timed: bool, polls: int, changes: int = 5) -> float:
    """µs CPU per woken poll's answer (one change wakes ``polls`` polls)."""
    node = _node(timed)
    node.clock.callLater = never_timer          # type: ignore[method-assign]
    node.clock.seconds = time.time              # type: ignore[method-assign]
    factory = node.http_factory()
    conns = subscribed(factory, polls)
    cpu = 0.0
    for n in range(changes + 1):
        for protocol, transport, sid in conns:
            protocol.dataReceived(request({"jsonrpc": "2.0", "id": 3,
                                           "method": "session.get_events",
                                           "params": [sid, 30, n]}))
        start = time.process_time()
        node.engine.apply_changes([_stream(1, n=n + 1)])
        woke = time.process_time() - start
        for protocol, transport, sid in conns:
            assert transport.value().count(b"HTTP/1.1 200") == 1
            transport.clear()
        if n:
            cpu += woke
    delivered = node.delivery_timings.by_label.get("longpoll")
    assert (delivered is not None and delivered.count >= changes * polls) == timed
    return cpu / (changes * polls) * 1e6


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--requests", type=int, default=20_000)
    p.add_argument("--polls", type=int, default=2_000)
    p.add_argument("--rounds", type=int, default=5)
    a = p.parse_args()
    if a.requests < 50 or a.polls < 1 or a.rounds < 1:
        p.error("--requests must be 50 or more, --polls and --rounds 1 or more")
    from pushengine.app.tap import tune_gc
    tune_gc()
    figures: dict[str, dict[bool, list[float]]] = {
        "answer": {True: [], False: []}, "event": {True: [], False: []}}
    for _ in range(a.rounds):
        for timed in (False, True):
            figures["answer"][timed].append(answers(timed, a.requests))
            figures["event"][timed].append(events(timed, a.polls))
    print(f"{a.requests:,} get_events answers with 10 events waiting, {a.polls:,} polls "
          f"woken per change; medians of {a.rounds} rounds")
    for key, label in (("answer", "µs CPU per answer"), ("event", "µs CPU per woken poll")):
        off = statistics.median(figures[key][False])
        on = statistics.median(figures[key][True])
        print(f"{label}: without histograms {off:.2f}, with {on:.2f} "
              f"({on - off:+.2f} µs, ×{on / off:.3f})")


if __name__ == "__main__":
    main()
