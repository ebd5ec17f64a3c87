"""CPU cost of one get_events answer on each HTTP front, in process.

    python bench/http_paths.py [--requests 20000]

Builds a node on a Clock (no sockets, no load generator: nothing but the
engine's own work is timed), makes one session with 10 events waiting and
feeds each front — ``--http twisted`` (twisted.web for everything) and
``--http fast`` (httptools for the hot paths) — the same keep-alive
requests, ``session.get_events(sid, 0, 0)`` (``ack`` 0 keeps the events
queued, so every answer carries them), 50 at a time, through an in-memory
transport. Prints CPU microseconds per answer and answers per CPU-second;
then the same for parked polls woken by a change (``--polls`` connections,
one change answers them all: the fan-out path of long-polling), and per poll
parked again. The collector runs with the node's own settings (``tune_gc``).
Run it on a quiet machine; wrk figures are in bench/http_roundtrip.py.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


from pushengine.app.tap import tune_gc  # noqa: E402
from inprocess_http import connect, never_timer, request, subscribed  # noqa: E402
from tests.http.harness import ClockNode, Http, Rpc  # noqa: E402


def measure(front: str, requests: int) -> float:
    node = ClockNode("--http", front, "--client-rate", "0")
    rpc = Rpc(Http(node.web.resource()))
    sid = rpc("session.create")
    rpc("stream.subscribe_public_live", sid, 50)
    node.engine.apply_changes([])
    from pushengine.core.changes import Change
    node.engine.apply_changes([Change("Stream", "upsert", i, {
        "id": i, "title": f"stream {i}", "user_id": 1, "live": True, "public": True,
        "created_at": f"2026-11-30T00:00:{i:02d}Z", "viewers": i}) for i in range(10)])
    one = request({"jsonrpc": "2.0", "id": 1, "method": "session.get_events",
                   "params": [sid, 0, 0]})
    protocol, transport = connect(node.http_factory(), 40000)
    batch = one * 50
    start = time.process_time()
    for _ in range(requests // 50):
        protocol.dataReceived(batch)
        out = transport.value()
        transport.clear()
        assert out.count(b"HTTP/1.1 200") == 50, out[:300]
    spent = time.process_time() - start
    return spent / (requests // 50 * 50)


def without_timers(clock) -> None:
    """``Clock.callLater`` sorts all its calls each time (fine for tests,
    quadratic with thousands of timers); a reactor keeps a heap. Replace it
    with timers that cost what a heap push costs and never fire."""
    clock.callLater = never_timer


def on_a_reactor_heap(clock) -> Any:
    """Timers on a reactor's own heap (``callLater``, ``reset``, ``cancel``,
    and ``runUntilCurrent`` at each turn, as in a running node), its time
    set by hand: what a timer per parked poll costs shows. Answers the
    reactor (``advance(seconds)`` runs what is due)."""
    from twisted.internet.selectreactor import SelectReactor

    class HandReactor(SelectReactor):
        now = clock.seconds()

        def seconds(self) -> float:  # type: ignore[override]
            return self.now

        def advance(self, dt: float) -> None:
            self.now += dt
            self.runUntilCurrent()

    reactor = HandReactor()
    clock.callLater = reactor.callLater
    clock.seconds = reactor.seconds
    return reactor


def measure_woken(front: str, polls: int, changes: int = 5,
                  heap: bool = False) -> tuple[float, float]:
    """CPU per answer of parked polls woken by one change, and per poll
    parked: ``polls`` keep-alive connections, each with a session on one
    shared view and a ``get_events`` parked; each change answers them all,
    then they park again. A long-polling session costs both per change.
    ``heap``: the timers on a reactor's heap (``on_a_reactor_heap``), each
    reactor turn's due timers run and timed with the parking."""
    from pushengine.core.changes import Change
    node = ClockNode("--http", front, "--client-rate", "0", "--max-client-sessions", "0",
                     "--max-client-connections", "0",
                     "--max-sessions", "0")
    reactor = on_a_reactor_heap(node.clock) if heap else None
    if reactor is None:
        without_timers(node.clock)
    factory = node.http_factory()
    conns = subscribed(factory, polls)
    spent = parking = 0.0
    for n in range(changes):
        polls_in = [request({"jsonrpc": "2.0", "id": 3, "method": "session.get_events",
                             "params": [sid, 30, n]}) for _, _, sid in conns]
        start = time.process_time()
        for (protocol, transport, sid), data in zip(conns, polls_in):
            protocol.dataReceived(data)
        if reactor is not None:
            reactor.advance(0.001)     # the turn ends: the reactor's timers
        parking += time.process_time() - start
        for protocol, transport, sid in conns:
            assert not transport.value(), transport.value()[:200]
        change = Change("Stream", "upsert", 1, {
            "id": 1, "title": "a stream", "user_id": 1, "live": True, "public": True,
            "created_at": "2030-01-01T00:00:00Z", "n": n})
        start = time.process_time()
        node.engine.apply_changes([change])
        if reactor is not None:
            reactor.advance(0.001)
        spent += time.process_time() - start
        for protocol, transport, sid in conns:
            assert transport.value().count(b"HTTP/1.1 200") == 1, transport.value()[:300]
            transport.clear()
    return spent / (changes * polls), parking / (changes * polls)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--requests", type=int, default=20_000)
    p.add_argument("--polls", type=int, default=2_000,
                   help="parked polls woken by each change (the woken figure)")
    p.add_argument("--heap", action="store_true",
                   help="the woken and parked figures with timers on a reactor's heap "
                        "(as in a node), not timers that cost nothing")
    a = p.parse_args()
    tune_gc()      # the collector's settings of a running node (twistd pushengine)
    costs = {front: measure(front, a.requests) for front in ("twisted", "fast")}
    for front, cost in costs.items():
        print(f"--http {front:8}: {cost * 1e6:7.1f} µs CPU per answer, "
              f"{1 / cost:9,.0f} answers per CPU-second")
    print(f"fast / twisted: ×{costs['twisted'] / costs['fast']:.1f}")
    woken = {front: measure_woken(front, a.polls, heap=a.heap) for front in ("twisted", "fast")}
    if a.heap:
        print("(timers on a reactor's heap)")
    for front, (cost, park) in woken.items():
        print(f"--http {front:8}: {cost * 1e6:7.1f} µs CPU per woken poll's answer "
              f"({a.polls:,} polls woken by one change), {park * 1e6:5.1f} µs per poll "
              f"parked again")


if __name__ == "__main__":
    main()
