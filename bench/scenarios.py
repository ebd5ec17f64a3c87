"""The benchmark scenarios, as data: what the driver runs against which server.

Each ``Run`` is one server started fresh, one load from ``bench/loadgen.py``
and the figures sampled meanwhile. ``suite(name)`` gives the list for
``full`` (about 35 minutes on 2 cores), ``quick`` (a few minutes, smaller N),
``targets`` (the streaming targets of issue 10, ~20 minutes),
``longpoll-targets`` (the lean HTTP path's targets, ~10 minutes) and ``smoke``
(seconds: what tests/bench/test_smoke.py runs).

0. answers -- get_events answers per second with events waiting (pushengine
             and nchan).
1. held   -- N idle long-polls: memory per session, CPU while idle, every poll
             answered at its timeout (pushengine and nchan).
2. fanout -- N sessions on one shared view, R changes a second: latency, lost
             events, CPU, answers per second (pushengine and nchan).
3. users  -- 2,000 sessions x 50 per-user views (100,000 views), changes spread
             over the users: routing throughput and latency (pushengine).
4. amqp   -- as 3, the changes coming through RabbitMQ, one change per message
             and batches (pushengine, when its --amqp works).

Groups 1 and 2 also run over the streaming transports (``transport`` "sse"
and "ws", both servers): held streams (open and idle: memory per stream) and
fan-out to streams; their names carry the transport (``fanout-ws-1000-10/s``).
"""
from __future__ import annotations

import resource
from dataclasses import dataclass, field

PUSHENGINE, NCHAN = "pushengine", "nchan"
STREAMS = ("sse", "ws")


@dataclass
class Run:
    group: str                 # held | fanout | users | amqp
    target: str                # pushengine | nchan
    sessions: int
    transport: str = "longpoll"   # longpoll | sse | ws (held and fanout)
    rate: float = 0.0          # changes per second (0: as fast as it goes)
    duration: float = 15.0     # seconds of publishing
    timeout: float = 30.0      # get_events / subscriber timeout
    subs: int = 1              # views per session (users, amqp)
    batch: int = 1             # changes per publish request / message
    note: str = ""
    engine_args: list[str] = field(default_factory=list)
    profile: bool = False      # py-spy the engine while publishing
    fast: bool = False         # shorter pauses (the smoke suite)
    count: int = 0             # publish at most this many changes (0: no limit)
    drain: float = 20.0        # longest wait for the last events after publishing
    quiet: float = 5.0         # ... ended sooner after this long without an event
    workers: int = 0           # loadgen processes (0: its default)

    @property
    def name(self) -> str:
        parts = [self.group, f"{self.sessions}"]
        if self.transport != "longpoll":
            parts.insert(1, self.transport)
        if self.subs > 1:
            parts[-1] += f"x{self.subs}"
        if self.group not in ("held", "answers"):
            parts.append(f"{self.rate:g}/s" if self.rate else "max")
        if self.batch > 1:
            parts.append(f"batch{self.batch}")
        return "-".join(parts)

    @property
    def key(self) -> tuple:
        """What a pushengine run and its nchan peer have in common."""
        return (self.group, self.transport, self.sessions, self.subs, self.rate, self.batch)

    def loadgen_args(self, url: str) -> list[str]:
        mode = self.group
        args = ["--target", self.target, "--url", url, "--mode", mode,
                "--transport", self.transport,
                "--sessions", str(self.sessions), "--timeout", f"{self.timeout:g}",
                "--label", f"{self.target} {self.name}"]
        if self.workers:
            args += ["--workers", str(self.workers)]
        if mode == "answers":
            args += ["--duration", f"{self.duration:g}"]
        elif mode != "held":
            args += ["--rate", f"{self.rate:g}", "--duration", f"{self.duration:g}",
                     "--batch", str(self.batch), "--count", str(self.count),
                     "--drain", f"{self.drain:g}", "--quiet", f"{self.quiet:g}"]
        if mode in ("users", "amqp"):
            args += ["--subs", str(self.subs)]
        if self.fast:
            args += ["--report-interval", "0.2", "--settle", "0.3", "--quiet", "1"]
        return args


def max_held() -> int:
    """The most long-polls one process can hold here: RLIMIT_NOFILE's hard limit
    less a margin for the listening socket, logs and the publisher."""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard == resource.RLIM_INFINITY:
        return 20_000
    return min(20_000, hard - 100)


def suite(name: str) -> list[Run]:
    both = (PUSHENGINE, NCHAN)
    runs: list[Run] = []
    if name == "smoke":
        for t in both:
            runs.append(Run("held", t, 20, timeout=2, fast=True))
            runs.append(Run("fanout", t, 20, rate=20, duration=2, timeout=10, fast=True))
        # held streams: the WebSocket only (the driver's held path is the same
        # for both streaming transports; the CI's time is not)
        runs.append(Run("held", PUSHENGINE, 20, transport="ws", timeout=2, fast=True))
        for tr in STREAMS:
            for t in both:
                runs.append(Run("fanout", t, 20, transport=tr, rate=20, duration=2,
                                timeout=10, fast=True))
        runs.append(Run("answers", PUSHENGINE, 10, duration=1, fast=True))
        runs.append(Run("users", PUSHENGINE, 10, rate=500, duration=2, subs=5,
                        timeout=10, fast=True))
        runs.append(Run("amqp", PUSHENGINE, 10, rate=500, duration=2, subs=5, batch=10,
                        timeout=10, fast=True))
        return runs
    if name == "targets":
        return target_runs()
    if name == "longpoll-targets":
        return longpoll_target_runs()
    quick = name == "quick"
    held = [1000, 5000] if quick else [1000, 10_000, max_held()]
    fan = [1000] if quick else [1000, 3000, 10_000]
    duration = 8.0 if quick else 15.0
    for n in held:
        for t in both:
            runs.append(Run("held", t, n, timeout=20,
                            note="" if n != max_held() or n == 20_000 else
                            f"20,000 asked; RLIMIT_NOFILE hard limit allows {n}"))
    for t in both:
        runs.append(Run("answers", t, 100, duration=duration * 2 / 3, workers=2,
                        note="10 events waiting, polls back to back"))
    for n in fan:
        for r in ((0.2, 1, 10, 100) if n == 10_000 and not quick else (1, 10, 100)):
            for t in both:
                runs.append(Run("fanout", t, n, rate=r, duration=20 if r < 1 else duration,
                                timeout=30))
    runs += stream_runs(quick, duration)
    users, subs = (500, 50) if quick else (2000, 50)
    runs.append(Run("users", PUSHENGINE, users, rate=5000, duration=duration, subs=subs,
                    note="5,000 changes/s made; each POST carries what is queued"))
    runs.append(Run("users", PUSHENGINE, users, rate=0, duration=duration * 2 / 3, subs=subs,
                    batch=100, note="publisher as fast as the engine takes it"))
    count = 10_000 if quick else 30_000
    runs.append(Run("amqp", PUSHENGINE, users, rate=0, duration=30, subs=subs, batch=1,
                    count=count, drain=90, quiet=30,
                    note=f"{count:,} changes, one per AMQP message, as fast as pika sends"))
    runs.append(Run("amqp", PUSHENGINE, users, rate=0, duration=30, subs=subs, batch=100,
                    count=count * 3, drain=90, quiet=30,
                    note=f"{count * 3:,} changes, 100 per AMQP message"))
    return runs


def stream_runs(quick: bool, duration: float) -> list[Run]:
    """Held streams and fan-out to streams, SSE and WebSocket, both servers.

    The issue's targets: 10,000 sessions on one view at 10 changes/s over
    WebSocket and over SSE (p99 < 500 ms, nothing lost), 20,000 held streams
    (< 20 KB each; the file limit may allow fewer), events per engine
    CPU-second >= 1/3 of nchan's.
    """
    both = (PUSHENGINE, NCHAN)
    runs: list[Run] = []
    held = [5000] if quick else [1000, 10_000, max_held()]
    for n in held:
        for tr in STREAMS:
            for t in both:
                runs.append(Run("held", t, n, transport=tr, timeout=10 if quick else 20,
                                note="" if n != max_held() or n == 20_000 else
                                f"20,000 asked; RLIMIT_NOFILE hard limit allows {n}"))
    # section 2's fan-out; 10,000 x 100/s (a million events a second) is past
    # what this loadgen reads on two cores, and 0.2/s was long-polling's limit
    fan = {1000: (1, 10, 100)} if quick else {1000: (1, 10, 100), 3000: (1, 10, 100),
                                              10_000: (1, 10)}
    for n, rates in fan.items():
        for r in rates:
            for tr in STREAMS:
                for t in both:
                    runs.append(Run("fanout", t, n, transport=tr, rate=r, duration=duration,
                                    timeout=30))
    return runs


def target_runs() -> list[Run]:
    """``--suite targets``: the issue's targets, side by side with nchan --
    10,000 streams on one view at 10 changes/s (WebSocket, SSE), the most
    held streams the file limit allows, and long-polling's fan-out 1,000 x
    10/s to compare with the figures it had before."""
    both = (PUSHENGINE, NCHAN)
    n = max_held()
    note = "" if n == 20_000 else f"20,000 asked; RLIMIT_NOFILE hard limit allows {n}"
    # 10 changes/s is 100,000 events a second for the loadgen to read (more
    # than it can on two cores shared with the server); 1 change/s shows what
    # one change to 10,000 streams costs each server with the loadgen keeping up
    return ([Run("fanout", t, 10_000, transport=tr, rate=r, duration=15, timeout=30)
             for r in (10, 1) for tr in STREAMS for t in both] +
            [Run("held", t, n, transport=tr, timeout=20, note=note)
             for tr in STREAMS for t in both] +
            [Run("fanout", t, 1000, rate=10, duration=15, timeout=30) for t in both])


def longpoll_target_runs() -> list[Run]:
    """``--suite longpoll-targets``: the lean HTTP path's targets, side by
    side with nchan -- get_events answers per second with events waiting,
    10,000 long-polling sessions on one view at 1 change/s, and the most
    held polls the file limit allows answered at their common timeout."""
    both = (PUSHENGINE, NCHAN)
    n = max_held()
    note = "" if n == 20_000 else f"20,000 asked; RLIMIT_NOFILE hard limit allows {n}"
    return ([Run("answers", t, 100, duration=8, workers=2,
                 note="10 events waiting, polls back to back") for t in both] +
            [Run("fanout", t, 10_000, rate=1, duration=20, timeout=30) for t in both] +
            [Run("held", t, n, timeout=20, note=note) for t in both])


def profile_suite() -> list[Run]:
    """The engine under py-spy: the heaviest fan-out (long-poll, WebSocket,
    SSE) and the per-user views."""
    return [Run("fanout", PUSHENGINE, 10_000, rate=10, duration=15, timeout=30, profile=True),
            *[Run("fanout", PUSHENGINE, 10_000, transport=tr, rate=10, duration=15,
                  timeout=30, profile=True) for tr in STREAMS],
            Run("users", PUSHENGINE, 2000, rate=0, duration=10, subs=50, batch=100,
                profile=True)]
