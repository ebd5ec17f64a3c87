"""The benchmark scenarios, as data: what the driver runs against which server.

Each ``Run`` is one server started fresh, one load from ``bench/loadgen.py``
and the figures sampled meanwhile. ``suite(name)`` gives the list for
``full`` (about 50 minutes on 2 cores), ``quick`` (~15 minutes, smaller N),
``targets`` (the streaming targets of issue 10, ~25 minutes),
``longpoll-targets`` (the lean HTTP path's targets, ~8 minutes), ``peers``
(WebSocket fan-out and held streams on the three servers, ~15 minutes) and
``smoke`` (seconds: what tests/bench/test_smoke.py runs). ``targets()`` gives the
targets the driver holds the figures against.

The servers: pushengine, nginx+nchan (every transport) and Socket.IO 4.8 on
Node (WebSocket only: ``bench/socketio/``), one process each. Every
WebSocket scenario runs on all three, so that each pushengine figure has a
ratio to both peers.

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
and "ws"; Socket.IO over "ws" only): held streams (open and idle: memory per
stream) and fan-out to streams; their names carry the transport
(``fanout-ws-1000-10/s``).
"""
from __future__ import annotations

import resource
from dataclasses import dataclass, field

PUSHENGINE, NCHAN, SOCKETIO = "pushengine", "nchan", "socketio"
PEERS = (NCHAN, SOCKETIO)
STREAMS = ("sse", "ws")
# the smoke runs' Socket.IO pings every half second (the default is every
# 25 s): a loadgen that does not answer them loses its sockets within the run
FAST_PINGS = ["--ping-interval", "500", "--ping-timeout", "1000"]


def servers(transport: str) -> tuple[str, ...]:
    """The servers a scenario over this transport runs on."""
    return (PUSHENGINE, NCHAN, SOCKETIO) if transport == "ws" else (PUSHENGINE, NCHAN)


@dataclass
class Run:
    group: str                 # held | fanout | users | amqp | answers
    target: str                # pushengine | nchan | socketio
    sessions: int
    transport: str = "longpoll"   # longpoll | sse | ws (held and fanout)
    rate: float = 0.0          # changes per second (0: as fast as it goes)
    duration: float = 15.0     # seconds of publishing
    timeout: float = 30.0      # get_events / subscriber timeout
    subs: int = 1              # views per session (users, amqp)
    batch: int = 1             # changes per publish request / message
    note: str = ""
    engine_args: list[str] = field(default_factory=list)
    peer_args: list[str] = field(default_factory=list)   # Socket.IO's server
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
        """What a pushengine run and its peers' runs have in common."""
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
        for t in (PUSHENGINE, SOCKETIO):
            runs.append(Run("held", t, 20, transport="ws", timeout=2, fast=True,
                            peer_args=FAST_PINGS if t == SOCKETIO else []))
        for tr in STREAMS:
            for t in servers(tr):
                runs.append(Run("fanout", t, 20, transport=tr, rate=20, duration=2,
                                timeout=10, fast=True,
                                peer_args=FAST_PINGS if t == SOCKETIO else []))
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
    if name == "peers":
        return peer_runs()
    quick = name == "quick"
    held = [1000, 5000] if quick else [1000, 10_000, max_held()]
    fan = [1000] if quick else [1000, 3000, 10_000]
    duration = 8.0 if quick else 15.0
    for n in held:
        for t in both:
            runs.append(Run("held", t, n, timeout=20, note=held_note(n)))
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


def held_note(n: int) -> str:
    if n != max_held() or n == 20_000:
        return ""
    return f"20,000 asked; RLIMIT_NOFILE hard limit allows {n}"


# a held stream run's idle window (seconds after the last stream connected):
# longer than the engine's --ws-ping (30 s, a ping 30 to 31 s after a
# socket's last write), so that the idle CPU of the most held streams counts
# one ping of every WebSocket, as it would over any longer while (an SSE
# stream, --sse-ping 15, gets two or three)
STREAM_IDLE = 45.0


def stream_runs(quick: bool, duration: float) -> list[Run]:
    """Held streams and fan-out to streams: SSE on pushengine and nchan,
    WebSocket on the three servers.

    The issue's targets: 10,000 sessions on one view at 10 changes/s over
    WebSocket and over SSE (p99 < 500 ms, nothing lost), 20,000 held streams
    (< 20 KB each; the file limit may allow fewer), events per engine
    CPU-second >= 1/3 of nchan's.
    """
    runs: list[Run] = []
    held = [5000] if quick else [1000, 10_000, max_held()]
    for n in held:
        for tr in STREAMS:
            for t in servers(tr):
                runs.append(Run("held", t, n, transport=tr,
                                timeout=10 if quick else STREAM_IDLE if n == held[-1] else 20,
                                note=held_note(n)))
    # section 2's fan-out; 10,000 x 100/s is a million events a second: past
    # what one core of any of the servers sends
    fan = {1000: (1, 10, 100)} if quick else {1000: (1, 10, 100), 3000: (1, 10, 100),
                                              10_000: (1, 10)}
    for n, rates in fan.items():
        for r in rates:
            for tr in STREAMS:
                for t in servers(tr):
                    runs.append(Run("fanout", t, n, transport=tr, rate=r, duration=duration,
                                    timeout=30))
    return runs


def target_runs() -> list[Run]:
    """``--suite targets``: the issue's targets, side by side with the peers
    -- 1,000 and 10,000 streams on one view at 10 and 1 changes/s (WebSocket
    on the three servers, SSE on pushengine and nchan), the most held streams
    the file limit allows, and long-polling's fan-out 1,000 x 10/s to compare
    with the figures it had before."""
    n = max_held()
    return ([Run("fanout", t, s, transport=tr, rate=r, duration=15, timeout=30)
             for s in (10_000, 1000) for r in (10, 1) for tr in STREAMS
             for t in servers(tr)] +
            [Run("held", t, n, transport=tr, timeout=STREAM_IDLE, note=held_note(n))
             for tr in STREAMS for t in servers(tr)] +
            [Run("fanout", t, 1000, rate=10, duration=15, timeout=30)
             for t in (PUSHENGINE, NCHAN)])


def peer_runs() -> list[Run]:
    """``--suite peers``: WebSocket fan-out to a limit-1 view, 1,000, 5,000
    and 10,000 streams x 1 and 10 changes/s for 15 s, and the most held
    WebSocket streams the file limit allows, on pushengine, nchan and
    Socket.IO in one run: latency, deliveries per second (at saturation,
    where a server falls behind), server CPU per delivered frame, idle memory
    per connection and the time to connect them."""
    n = max_held()
    return ([Run("fanout", t, s, transport="ws", rate=r, duration=15, timeout=30)
             for s in (1000, 5000, 10_000) for r in (1, 10) for t in servers("ws")] +
            [Run("held", t, n, transport="ws", timeout=20, note=held_note(n))
             for t in servers("ws")])


def longpoll_target_runs() -> list[Run]:
    """``--suite longpoll-targets``: the lean HTTP path's targets, side by
    side with nchan -- get_events answers per second with events waiting,
    10,000 long-polling sessions on one view at 1 change/s, and the most
    held polls the file limit allows answered at their common timeout."""
    both = (PUSHENGINE, NCHAN)
    n = max_held()
    return ([Run("answers", t, 100, duration=8, workers=2,
                 note="10 events waiting, polls back to back") for t in both] +
            [Run("fanout", t, 10_000, rate=1, duration=20, timeout=30) for t in both] +
            [Run("held", t, n, timeout=20, note=held_note(n)) for t in both])


def profile_suite() -> list[Run]:
    """The engine under py-spy: the heaviest fan-out (long-poll, WebSocket,
    SSE) and the per-user views."""
    return [Run("fanout", PUSHENGINE, 10_000, rate=10, duration=15, timeout=30, profile=True),
            *[Run("fanout", PUSHENGINE, 10_000, transport=tr, rate=10, duration=15,
                  timeout=30, profile=True) for tr in STREAMS],
            Run("users", PUSHENGINE, 2000, rate=0, duration=10, subs=50, batch=100,
                profile=True)]


# ---------------------------------------------------------------------------
# the targets the figures are held against


@dataclass
class Target:
    """One target: a figure of one pushengine run (``driver.row_figures``),
    absolute or as its ratio to a peer's, below or above a limit."""
    text: str
    group: str
    transport: str
    sessions: int
    figure: str
    limit: float
    above: bool = False        # True: the figure must reach the limit
    rate: float = 0.0
    versus: str = ""           # "nchan", "socketio": the ratio to that peer's figure
    nothing_lost: bool = False

    def matches(self, run: dict) -> bool:
        return (run.get("target") == PUSHENGINE and run.get("group") == self.group
                and run.get("transport", "longpoll") == self.transport
                and run.get("sessions") == self.sessions
                and float(run.get("rate") or 0) == float(self.rate))


def targets() -> list[Target]:
    """The targets of the issues, as figures of the runs above."""
    n = max_held()
    out = []
    for tr, name in (("ws", "WebSocket"), ("sse", "SSE")):
        out.append(Target(f"10,000 {name} sessions x 10 changes/s: p99 < 500 ms, nothing lost",
                          "fanout", tr, 10_000, "p99", 0.5, rate=10, nothing_lost=True))
    for tr, name in (("ws", "WebSocket"), ("sse", "SSE")):
        out.append(Target(f"{n:,} held {name} streams < 20 KB each", "held", tr, n,
                          "KB/session", 20.0))
    for tr, name in (("ws", "WebSocket"), ("sse", "SSE")):
        out.append(Target(f"events per CPU-second >= 1/3 of nchan's ({name}, 10,000 x 1/s)",
                          "fanout", tr, 10_000, "events/CPU-s", 1 / 3, above=True, rate=1,
                          versus=NCHAN))
    out.append(Target("10,000 long-polling sessions x 1 change/s: p99 < 1 s, nothing lost",
                      "fanout", "longpoll", 10_000, "p99", 1.0, rate=1, nothing_lost=True))
    out.append(Target("10,000 long-polling sessions x 1 change/s: p99 within x1.5 of nchan's",
                      "fanout", "longpoll", 10_000, "p99", 1.5, rate=1, versus=NCHAN))
    out.append(Target(f"{n:,} held polls answered within 2 s of their timeout", "held",
                      "longpoll", n, "last late s", 2.0))
    out.append(Target("get_events answers with events waiting >= 0.5 x nchan's", "answers",
                      "longpoll", 100, "answers/s", 0.5, above=True, versus=NCHAN))
    # the scale round: every streaming fan-out within x1.5 of nchan's p99 and
    # ahead of Socket.IO's, held streams at or below nchan's memory, idle
    # streams under 1 % of a core
    for tr, name in (("ws", "WebSocket"), ("sse", "SSE")):
        for sessions in (1000, 10_000):
            for rate in (1, 10):
                run = f"{sessions:,} {name} streams x {rate}/s"
                out.append(Target(f"{run}: p99 within x1.5 of nchan's", "fanout", tr,
                                  sessions, "p99", 1.5, rate=rate, versus=NCHAN,
                                  nothing_lost=True))
                if tr == "ws":
                    out.append(Target(f"{run}: p99 ahead of Socket.IO's", "fanout", tr,
                                      sessions, "p99", 1.0, rate=rate, versus=SOCKETIO,
                                      nothing_lost=True))
        out.append(Target(f"{n:,} held {name} streams: memory at or below nchan's", "held",
                          tr, n, "KB/session", 1.0 + 1e-9, versus=NCHAN))
        out.append(Target(f"{n:,} held {name} streams: idle CPU <= 1 % of a core", "held",
                          tr, n, "idle CPU %", 1.0 + 1e-9))
    return out
