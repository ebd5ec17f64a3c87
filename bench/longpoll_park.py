"""CPU cost of parking a long-poll and ending it, in process, on a reactor's timers.

    python bench/longpoll_park.py [--sessions 10000] [--rounds 5] [--baseline OLD_longpoll.py]

Builds the engine's sessions (no HTTP: ``transports.longpoll.LongPolling``
alone) on a real reactor object whose clock is set by hand, so that timers
go through the reactor's own heap (``callLater``, ``cancel``,
``runUntilCurrent``) as in a running node, and times in CPU seconds
(``time.process_time``), per poll:

- parked again: every session polls again while its poll is parked (the
  new poll answers the old one with ``[]``: a client's next request after
  an answer, as in long-poll fan-out);
- answered: every session parks, then every poll is answered (what
  ``notify`` does when a change brings events to them all);
- timed out: every session parks, the clock passes the timeout, the reactor
  runs its due timers.

``--baseline`` times another version of ``longpoll.py`` (e.g. ``git show
main:pushengine/transports/longpoll.py > /tmp/old.py``) beside this one, in
the same process, alternating, and prints the ratio: compare figures from
one run (the machine may be shared).
"""
from __future__ import annotations

import argparse
import gc
import importlib.util
import os
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from twisted.internet.selectreactor import SelectReactor  # noqa: E402

from pushengine.app.engine import build_engine  # noqa: E402
from pushengine.core.sessions import SessionSettings  # noqa: E402
from pushengine.stores.memory import MemoryStore  # noqa: E402
from pushengine.views.spec import parse_catalog  # noqa: E402


class HandClock(SelectReactor):
    """A reactor never run: its timers are real, its time is ``now``."""

    now = 1_000_000.0

    def seconds(self) -> float:  # type: ignore[override]
        return self.now

    def advance(self, dt: float) -> None:
        self.now += dt
        self.runUntilCurrent()


def load_poller(path: str | None) -> Any:
    if path is None:
        from pushengine.transports.longpoll import LongPolling
        return LongPolling
    spec = importlib.util.spec_from_file_location("baseline_longpoll", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.LongPolling


def node(poller_class: Any, sessions: int) -> tuple[Any, Any, list, HandClock]:
    clock = HandClock()
    catalog = parse_catalog({"types": {}, "views": {}})
    engine = build_engine(clock, catalog, MemoryStore(catalog.id_fields),
                          SessionSettings(session_timeout=600, max_timeout=120,
                                          max_client_sessions=0))
    made = [engine.sessions.create() for _ in range(sessions)]
    return engine, poller_class(engine.sessions, clock), made, clock


def measure(poller_class: Any, sessions: int) -> dict[str, float]:
    """CPU µs per poll for each way a poll ends."""
    out: dict[str, float] = {}
    engine, poller, made, clock = node(poller_class, sessions)
    get_events = poller.get_events
    for s in made:
        get_events(s, 30.0, None)
    clock.advance(0.01)
    rounds = 5
    start = time.process_time()
    for _ in range(rounds):
        for s in made:
            get_events(s, 30.0, None)      # answers the parked one with []
        clock.advance(0.01)                # the reactor's turn: its timers
    out["parked again"] = (time.process_time() - start) / (rounds * sessions) * 1e6
    clock.advance(31)

    answer = poller.answer
    start = time.process_time()
    for _ in range(rounds):
        for s in made:
            get_events(s, 30.0, None)
        clock.advance(0.01)
        for s in made:                     # a change wakes them all
            answer(s, s.delivery)
        clock.advance(0.01)
    out["parked, answered"] = (time.process_time() - start) / (rounds * sessions) * 1e6

    spent = 0.0
    for _ in range(rounds):
        start = time.process_time()
        for s in made:
            get_events(s, 1.0, None)
        clock.advance(1.3)                 # every timeout passes
        spent += time.process_time() - start
        assert engine.sessions.waiting == 0
    out["parked, timed out"] = spent / (rounds * sessions) * 1e6
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sessions", type=int, default=10_000)
    p.add_argument("--rounds", type=int, default=5,
                   help="measurements of each version; the smallest is printed")
    p.add_argument("--baseline", default=None,
                   help="another version of transports/longpoll.py to time beside this one")
    a = p.parse_args()
    gc.collect()
    versions = {"this": load_poller(None)}
    if a.baseline:
        versions = {"baseline": load_poller(a.baseline), **versions}
    best: dict[str, dict[str, float]] = {v: {} for v in versions}
    for _ in range(a.rounds):
        for name, cls in versions.items():      # alternated: the same load for both
            for k, v in measure(cls, a.sessions).items():
                best[name][k] = min(v, best[name].get(k, v))
    print(f"CPU µs per poll, {a.sessions:,} sessions, smallest of {a.rounds} "
          f"(load average {os.getloadavg()[0]:.2f})")
    names = list(best["this"])
    print(f"{'':20}" + "".join(f"{v:>12}" for v in versions)
          + ("       ratio" if a.baseline else ""))
    for k in names:
        row = f"{k:20}" + "".join(f"{best[v][k]:12.2f}" for v in versions)
        if a.baseline:
            row += f"      ×{best['this'][k] / best['baseline'][k]:.2f}"
        print(row)


if __name__ == "__main__":
    main()
