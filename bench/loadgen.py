"""Load generator for pushengine, nchan and Socket.IO: long-polling or streaming sessions and a publisher.

Processes of its own, so that it is not part of what is measured, and lean
enough that no server's figure is its own: ``--workers`` processes (2 by
default) hold the sessions, one connection each (as a browser has), set up on
uvloop (asyncio's loop where uvloop is not installed); a publisher at a set
rate runs in the coordinating process. Streams are then read by a plain epoll
loop per worker into one shared buffer, with no JSON parsing on the way: the
WebSocket frames are walked in place and an event's ``n`` and ``sent_at`` are
found by byte search (pushengine's events by one compiled pattern). The CPU of
every loadgen process is measured from ``/proc``; a run where any of them
passes ``LOADGEN_BOUND_PCT`` (60 %) of a core is flagged ``loadgen_bound``:
its figures may be the loadgen's, not the server's.

    python bench/loadgen.py --target pushengine --url http://127.0.0.1:8080 \\
        --mode fanout --sessions 1000 --rate 10 --duration 15
    python bench/loadgen.py --target nchan --url http://127.0.0.1:8090 --mode held \\
        --sessions 10000 --timeout 20
    python bench/loadgen.py --url http://127.0.0.1:8080 --mode fanout --transport ws \\
        --sessions 10000 --rate 10
    python bench/loadgen.py --target socketio --url http://127.0.0.1:8070 --mode fanout \\
        --transport ws --sessions 10000 --rate 10

Modes:

- ``held``: every session long-polls with ``--timeout`` and nothing is
  published: the first poll of every session must be answered (empty) at its
  timeout. Reports when all were connected and the window in which the server
  sat idle (for the driver's memory and CPU figures).
- ``fanout``: every session subscribes to one shared view (pushengine:
  ``stream.subscribe_public_live [sid, 1]``, a limit-1 view holding one object;
  nchan: channel ``fan``; Socket.IO: room ``fan``). The publisher updates that
  one object ``--rate`` times a second, bumping ``obj.n`` and putting its send
  time in ``obj.sent_at``: every session must see every ``n`` exactly once.
- ``users``: (pushengine) every session subscribes ``--subs`` per-user views
  (``stream.subscribe_user [sid, user, 1]``, distinct users, one JSON-RPC batch);
  the publisher sends ``--rate`` changes a second spread at random over all the
  users, ``--batch`` changes per ``POST /api/publish``; each user has its own
  ``n`` sequence.
- ``answers``: every session has 10 events of the shared view waiting and
  polls back to back without acknowledging them (``get_events [sid, 0, 0]``;
  nchan: the same ``If-Modified-Since`` every time), for ``--duration``
  seconds: answers per second with events waiting.
- ``amqp``: as ``users``, but the changes are published to the AMQP fanout
  exchange (``--amqp``, ``--exchange``) with pika, ``--batch`` changes per
  message (1: single).

Every call of an engine session after ``session.create`` names it in the URL
(``POST /api/jsonrpc?session=SID``), as the browser client does: behind a
balancer hashing on it (deploy/haproxy.cfg.in, ``bench/cores.py``) the
session's calls reach the node holding it.

Every session polls ``session.get_events [sid, timeout, ack]`` with the last
``seq`` it received as ``ack`` (nchan: ``GET /sub/CH`` with ``If-Modified-Since``
and ``If-None-Match`` of the previous answer). For every event the latency is
``now - obj.sent_at``; a jump in ``n`` is a gap, an ``n`` seen again a duplicate.
Lost events are counted at the end: expected (every ``n`` published, for each
session that sees it) minus the distinct events received.

Streams (``--transport sse`` or ``ws``; the held and fanout modes): every
session holds one stream instead of polling -- pushengine: an SSE stream
(``GET /api/events?session=SID`` after ``session.create`` and the
subscription over HTTP on the same connection) or a WebSocket (``GET
/api/ws``, then ``session.create`` and the subscription as JSON-RPC on the
socket; events come as ``events`` notifications); nchan: ``GET /stream/CH``
as EventSource or WebSocket; Socket.IO (WebSocket only): Engine.IO v4 over
``GET /socket.io/?EIO=4&transport=websocket`` -- the open packet ``0{...}``,
``40`` to connect, ``420["subscribe","CH"]`` answered by the ack ``430[true]``,
then ``42["m",{...}]`` per message; its pings (``2``) are answered (``3``).
The same accounting per event. ``held`` keeps the streams open and idle for
``--timeout`` seconds; a stream the server ends is an error.

``--rate 0`` publishes as fast as the server takes it (``--inflight``
requests pipelined on one connection, which keeps their order).

``--publish sql --database postgresql://...`` (pushengine, ``fanout`` and
``users``): the changes are commits instead, one ``UPDATE streams SET n = n
+ 1, sent_at = <now> WHERE id = ...`` per transaction at ``--rate``, from a
process of its own, on rows it first sets to this run's ``n``; the node
follows them through the WAL (bench/pg_e2e.py sets up the rest).

A live line on stderr shows the progress; the result is one JSON object
(``--json-out FILE``, else stdout).
"""
from __future__ import annotations

import argparse
import asyncio
import base64
import bisect
import hashlib
import json
import math
import multiprocessing
import os
import random
import re
import resource
import select
import signal
import socket
import sys
import time
import urllib.request
from collections import deque
from dataclasses import asdict, dataclass, field
from typing import Any, Callable
from urllib.parse import urlsplit

try:   # the bench extra brings these; the loadgen still runs without them, slower
    import orjson
    loads: Callable[[Any], Any] = orjson.loads
except ImportError:  # pragma: no cover
    orjson = None
    loads = json.loads
try:
    import uvloop
except ImportError:  # pragma: no cover
    uvloop = None
try:
    import numpy
except ImportError:  # pragma: no cover
    numpy = None

PUSHENGINE, NCHAN, SOCKETIO = "pushengine", "nchan", "socketio"
TARGETS = (PUSHENGINE, NCHAN, SOCKETIO)
# the peers take one message per publish request (pipelined) and send every
# subscriber one frame per message
PEERS = (NCHAN, SOCKETIO)
# a loadgen process above this share of a core may be what a run measures
LOADGEN_BOUND_PCT = 60.0

OBJ_ID = 1
CREATED_AT = "2026-01-01T00:00:00Z"
FAN_CREATED_AT = "2030-01-01T00:00:00Z"   # newer than anything else: first in the view
USER_OBJ_BASE = 1_000_000
FAN_CHANNEL = "fan"
HELD_CHANNEL = "held"
CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE_KB = os.sysconf("SC_PAGE_SIZE") // 1024

# ---------------------------------------------------------------------------
# limits, event loop, CPU


def raise_nofile() -> int:
    """RLIMIT_NOFILE up to the hard limit; returns the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY:
        hard = 1 << 20
    if soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError):
            pass
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def run_loop(coro: Any) -> Any:
    """Run a coroutine on uvloop where it is installed, else on asyncio's loop."""
    if uvloop is not None:
        return uvloop.run(coro)
    return asyncio.run(coro)


def event_loop_name() -> str:
    return f"uvloop {uvloop.__version__}" if uvloop is not None else "asyncio"


def proc_sample(pid: int) -> tuple[int, float] | None:
    """(RSS in KiB, user + system CPU seconds) of one process, from /proc/PID/stat."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()
    return int(fields[21]) * PAGE_KB, (int(fields[11]) + int(fields[12])) / CLK_TCK


def proc_cpu_seconds(pid: int) -> float | None:
    sample = proc_sample(pid)
    return sample[1] if sample else None


# ---------------------------------------------------------------------------
# latency histogram: log buckets of 2 %, mergeable, from 1 microsecond

_SCALE = 50.0  # buckets per factor e


class Histogram:
    __slots__ = ("buckets", "count", "total", "max")

    def __init__(self) -> None:
        self.buckets: dict[int, int] = {}
        self.count = 0
        self.total = 0.0
        self.max = 0.0

    def add(self, seconds: float) -> None:
        us = seconds * 1e6
        idx = int(math.log(us) * _SCALE) if us > 1.0 else 0
        b = self.buckets
        b[idx] = b.get(idx, 0) + 1
        self.count += 1
        self.total += seconds
        if seconds > self.max:
            self.max = seconds

    def add_many(self, values: list[float]) -> None:
        """Many latencies at once (the workers collect them in a list and add
        them once per report): the same buckets as ``add``, by numpy."""
        if not values:
            return
        if numpy is None:
            for v in values:
                self.add(v)
            return
        arr = numpy.asarray(values, dtype=numpy.float64)
        us = arr * 1e6
        idx = numpy.where(us > 1.0, numpy.log(numpy.maximum(us, 1.0)) * _SCALE, 0.0)
        keys, counts = numpy.unique(idx.astype(numpy.int64), return_counts=True)
        b = self.buckets
        for k, c in zip(keys.tolist(), counts.tolist()):
            b[k] = b.get(k, 0) + c
        self.count += len(values)
        self.total += float(arr.sum())
        self.max = max(self.max, float(arr.max()))

    def merge(self, other: "Histogram | dict") -> None:
        if isinstance(other, dict):
            other = Histogram.from_dict(other)
        for k, v in other.buckets.items():
            self.buckets[k] = self.buckets.get(k, 0) + v
        self.count += other.count
        self.total += other.total
        self.max = max(self.max, other.max)

    def percentile(self, q: float) -> float | None:
        if not self.count:
            return None
        rank = q / 100.0 * self.count
        seen = 0
        for k in sorted(self.buckets):
            seen += self.buckets[k]
            if seen >= rank:
                return min(math.exp((k + 0.5) / _SCALE) / 1e6, self.max)
        return self.max

    def summary(self) -> dict[str, float | None]:
        return {"count": self.count,
                "mean": self.total / self.count if self.count else None,
                "p50": self.percentile(50), "p90": self.percentile(90),
                "p95": self.percentile(95), "p99": self.percentile(99),
                "p999": self.percentile(99.9),
                "max": self.max if self.count else None}

    def to_dict(self) -> dict:
        return {"buckets": self.buckets, "count": self.count, "total": self.total,
                "max": self.max}

    @classmethod
    def from_dict(cls, d: dict) -> "Histogram":
        h = cls()
        h.buckets = {int(k): v for k, v in d["buckets"].items()}
        h.count, h.total, h.max = d["count"], d["total"], d["max"]
        return h


# ---------------------------------------------------------------------------
# a minimal HTTP/1.1 client connection: keep-alive, pipelining, chunked bodies
# (long-polls and the publisher)


class HttpError(Exception):
    pass


class Response:
    __slots__ = ("status", "headers", "body", "at")

    def __init__(self, status: int, headers: dict[bytes, bytes], body: bytes, at: float):
        self.status = status
        self.headers = headers
        self.body = body
        self.at = at


def parse_head(head: bytes) -> tuple[int, dict[bytes, bytes]]:
    """The status and the headers (names lower-cased) of a response head."""
    lines = head.split(b"\r\n")
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        headers[name.strip().lower()] = value.strip()
    return int(lines[0].split(b" ", 2)[1]), headers


class HttpConn(asyncio.Protocol):
    """One keep-alive connection. ``request(raw)`` sends the raw request and
    returns a future of the ``Response``; requests may be pipelined."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.waiters: deque[asyncio.Future] = deque()
        self.head: tuple | None = None   # (status, headers, body start, length or -1)
        self.lost_reason: Exception | None = None

    def connection_made(self, transport) -> None:
        self.transport = transport

    def connection_lost(self, exc) -> None:
        self.lost_reason = exc or HttpError("connection closed")
        while self.waiters:
            w = self.waiters.popleft()
            if not w.done():
                w.set_exception(HttpError(f"connection lost: {self.lost_reason}"))
        self.transport = None

    def request(self, raw: bytes) -> asyncio.Future:
        fut = asyncio.get_running_loop().create_future()
        if self.transport is None or self.transport.is_closing():
            fut.set_exception(HttpError("not connected"))
            return fut
        self.waiters.append(fut)
        self.transport.write(raw)
        return fut

    def close(self) -> None:
        if self.transport is not None:
            self.transport.abort()

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        while True:
            if self.head is None:
                end = buf.find(b"\r\n\r\n")
                if end < 0:
                    return
                status, headers = parse_head(bytes(buf[:end]))
                start = end + 4
                if status in (204, 304) or 100 <= status < 200:
                    length = 0
                elif b"content-length" in headers:
                    length = int(headers[b"content-length"])
                elif headers.get(b"transfer-encoding", b"").lower() == b"chunked":
                    length = -1
                else:
                    length = -2  # until close: not used by these servers
                self.head = (status, headers, start, length)
            status, headers, start, length = self.head
            if length >= 0:
                if len(buf) < start + length:
                    return
                body = bytes(buf[start:start + length])
                del buf[:start + length]
            elif length == -1:
                parsed = _dechunk(buf, start)
                if parsed is None:
                    return
                body, consumed = parsed
                del buf[:consumed]
            else:
                return
            self.head = None
            at = time.time()
            if self.waiters:
                w = self.waiters.popleft()
                if not w.done():
                    w.set_result(Response(status, headers, body, at))
            if headers.get(b"connection", b"").lower() == b"close" and self.transport:
                self.transport.close()


def _dechunk(buf: bytearray, pos: int) -> tuple[bytes, int] | None:
    parts = []
    while True:
        eol = buf.find(b"\r\n", pos)
        if eol < 0:
            return None
        size = int(bytes(buf[pos:eol]).split(b";", 1)[0], 16)
        if size == 0:
            end = buf.find(b"\r\n\r\n", eol)  # trailers (none) then CRLF
            if end < 0:
                return None
            return b"".join(parts), end + 4
        start = eol + 2
        if len(buf) < start + size + 2:
            return None
        parts.append(bytes(buf[start:start + size]))
        pos = start + size + 2


async def connect(host: str, port: int, retries: int = 5) -> HttpConn:
    loop = asyncio.get_running_loop()
    delay = 0.05
    for attempt in range(retries):
        try:
            _, proto = await loop.create_connection(HttpConn, host, port)
            return proto
        except OSError:
            if attempt == retries - 1:
                raise
            await asyncio.sleep(delay)
            delay *= 2
    raise AssertionError("unreachable")


def post(path: str, body: bytes, host: str = "127.0.0.1") -> bytes:
    return (b"POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n" % (path.encode(), host.encode(), len(body))) + body


def rpc_path(sid: str) -> str:
    """A session's JSON-RPC URL: ``?session=SID``, as the browser client
    sends it, so that a balancer hashing on it keeps the session on one node."""
    return "/api/jsonrpc?session=" + sid


def rpc_body(method: str, params: list, id_: int = 1) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": id_, "method": method, "params": params},
                      separators=(",", ":")).encode()


# ---------------------------------------------------------------------------
# what every worker counts


@dataclass
class Stats:
    connected: int = 0
    setup_errors: int = 0
    failed_sessions: list = field(default_factory=list)
    answers: int = 0            # poll answers (streams: reads that carried events)
    empty_answers: int = 0
    events: int = 0             # distinct update events received (with n)
    duplicates: int = 0
    gap_events: int = 0         # n skipped while receiving
    resets: int = 0
    pings: int = 0
    other_events: int = 0
    errors: dict = field(default_factory=dict)
    bytes_in: int = 0
    first_answered: int = 0     # held: first polls answered
    first_on_time: int = 0
    first_early: int = 0
    first_late: int = 0
    first_min: float | None = None
    first_max: float | None = None
    polling: int = 0            # sessions whose first poll was sent
    first_poll_at_min: float | None = None   # when the first poll of any session left
    first_poll_at_max: float | None = None
    last_event_at: float = 0.0
    streams_closed: int = 0     # streams the server ended (not by the loadgen)
    cpu: float = 0.0

    def error(self, what: str) -> None:
        self.errors[what] = self.errors.get(what, 0) + 1


# the engine's events as it encodes them: {"seq":N,"key":"...","action":"...","obj":...}
# (the key's escapes matched as an unrolled loop: half the time of an
# alternation per character)
EVENT_RE = re.compile(
    rb'\{"seq":(\d+),"key":"([^"\\]*(?:\\.[^"\\]*)*)","action":"([a-z]+)"'
    rb'(?:,"obj":\[?\{"id":(\d+),"n":(\d+),"sent_at":([0-9.eE+-]+))?')
# the peers' messages are the publisher's bytes: {"n":N,"sent_at":T,"pad":"..."}
# (Socket.IO re-encodes them with the keys in the same order)
MARK_N = b'"n":'
MARK_SENT = b',"sent_at":'
# padded to the size of one of the engine's update events (object and old
# object), so that every server moves the same bytes
PEER_PAD = b',"pad":"' + b"x" * 280 + b'"}'
RESULT_PREFIX = b'{"jsonrpc":"2.0","result":'
NOTIFICATION_PREFIX = b'{"jsonrpc":"2.0","method":'


def peer_message(n: int, now: float) -> bytes:
    return b'{"n":%d,"sent_at":%r' % (n, now) + PEER_PAD


def engine_tuples(events: list) -> list[tuple[bytes, ...]]:
    """Decoded engine events as EVENT_RE's groups (other key order, escapes)."""
    out = []
    for e in events:
        obj = e.get("obj")
        if isinstance(obj, list):
            obj = obj[0] if obj else None
        oid = n = sent = b""
        if isinstance(obj, dict) and "n" in obj:
            oid, n = str(obj.get("id")).encode(), str(obj["n"]).encode()
            sent = repr(float(obj.get("sent_at", 0))).encode()
        out.append((str(e["seq"]).encode(), e["key"].encode(), e["action"].encode(),
                    oid, n, sent))
    return out


class EngineEvents:
    """Counting pushengine's events in ``data[a:b]`` (one long-poll answer,
    one WebSocket notification, whole SSE messages): one compiled pattern
    gives every event's seq, action, object id, ``n`` and ``sent_at``; JSON
    is parsed only when the pattern does not match every event."""

    w: "Worker"
    last_n: dict[bytes, int]
    base: int
    ack: int

    def slow_events(self, raw: bytes) -> list:
        """The events in ``raw``, decoded (the transport's own framing)."""
        raise NotImplementedError

    def note_state(self, state: list) -> None:
        # objects left by earlier runs on the same server have n below this run's base
        for o in state:
            if isinstance(o.get("n"), int) and o["n"] >= self.base:
                self.last_n[str(o["id"]).encode()] = o["n"]

    def account(self, data, a: int, b: int, now: float) -> int:
        """Count the events of ``data[a:b]``; the number of events seen."""
        matches = EVENT_RE.findall(data, a, b)
        if len(matches) != data.count(b'{"seq":', a, b):
            matches = engine_tuples(self.slow_events(bytes(data[a:b])))
        if not matches:
            return 0
        st = self.w.stats
        lat = self.w.lat
        last_n, base = self.last_n, self.base
        for seq, key, action, oid, n, sent in matches:
            if n:
                n = int(n)
                prev = last_n.get(oid, base)
                if n <= prev:
                    st.duplicates += 1
                else:
                    if n != prev + 1:
                        st.gap_events += n - prev - 1
                    last_n[oid] = n
                    if action == b"reset":
                        st.resets += 1
                    else:
                        st.events += 1
                        lat.append(now - float(sent))
            elif action == b"ping":
                st.pings += 1
            elif action == b"reset":
                st.resets += 1
            else:
                st.other_events += 1
        seq = int(matches[-1][0])
        if seq > self.ack:
            self.ack = seq
        if now > st.last_event_at:
            st.last_event_at = now
        return len(matches)


class MarkedEvents:
    """Counting the peers' messages in ``data[a:b]`` by byte search: each
    ``"n":`` and the ``,"sent_at":`` after it, no JSON parsed. ``many``: the
    region may hold several messages (a long-poll answer, SSE messages);
    a WebSocket frame holds one."""

    w: "Worker"
    last: int
    many = True

    def account(self, data, a: int, b: int, now: float) -> int:
        i = data.find(MARK_N, a, b)
        if i < 0:
            return 0
        st = self.w.stats
        lat = self.w.lat
        last = self.last
        got = 0
        while i >= 0:
            j = data.find(MARK_SENT, i, b)
            if j < 0:
                break
            e = j + 11
            k = data.find(b",", e, b)
            if k < 0:
                k = data.find(b"}", e, b)
            n = int(data[i + 4:j])
            got += 1
            if n <= last:
                st.duplicates += 1
            else:
                if n != last + 1:
                    st.gap_events += n - last - 1
                last = n
                st.events += 1
                lat.append(now - float(data[e:k]))
            if not self.many:
                break
            i = data.find(MARK_N, k, b)
        self.last = last
        if got and now > st.last_event_at:
            st.last_event_at = now
        return got


# ---------------------------------------------------------------------------
# long-polling subscribers (asyncio protocols)


def user_calls(index: int, subs: int) -> list[tuple[str, list]]:
    """The ``users`` mode's subscriptions of session ``index``: its ``subs``
    users' views (``stream.subscribe_user [sid, user, 1]``, the sid added)."""
    return [("stream.subscribe_user", [u, 1]) for u in range(index * subs, index * subs + subs)]


class Session(EngineEvents):
    """One pushengine session: a connection, its subscriptions, its poll loop."""

    def __init__(self, w: "Worker", index: int) -> None:
        self.w = w
        self.index = index
        self.conn: HttpConn | None = None
        self.sid = ""
        self.ack = 0
        self.last_n = {}   # object id -> last n seen
        self.base = w.cfg["n_base"]
        self.path = "/api/jsonrpc"

    async def setup(self) -> None:
        cfg = self.w.cfg
        self.conn = await connect(self.w.host, self.w.port)
        r = await self.rpc(rpc_body("session.create", []))
        self.sid = r["result"]
        self.path = rpc_path(self.sid)
        if cfg["mode"] in ("fanout", "held", "answers"):
            r = await self.rpc(rpc_body("stream.subscribe_public_live", [self.sid, 1]))
            self.note_state(r["result"][1])
        else:
            calls = [{"jsonrpc": "2.0", "id": j, "method": method, "params": [self.sid, *params]}
                     for j, (method, params) in enumerate(user_calls(self.index, cfg["subs"]))]
            r = await self.rpc(json.dumps(calls, separators=(",", ":")).encode())
            for answer in r:
                if "result" not in answer:
                    raise HttpError(f"subscribe failed: {answer.get('error')}")
                self.note_state(answer["result"][1])

    def slow_events(self, raw: bytes) -> list:
        return loads(raw).get("result", [])

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()

    async def rpc(self, body: bytes) -> Any:
        resp = await self.conn.request(post(self.path, body))
        if resp.status != 200:
            raise HttpError(f"HTTP {resp.status}")
        value = loads(resp.body)
        if isinstance(value, dict) and "error" in value:
            raise HttpError(f"RPC error {value['error']}")
        return value

    async def run(self) -> None:
        w, st = self.w, self.w.stats
        timeout = w.cfg["timeout"]
        sid = json.dumps(self.sid)
        head = b'{"jsonrpc":"2.0","id":1,"method":"session.get_events","params":[%s,%s,' % (
            sid.encode(), json.dumps(timeout).encode())
        first = True
        while not w.stopping:
            body = head + b"%d]}" % self.ack
            sent = time.time()
            if first:
                w.note_first_poll(sent)
            try:
                resp = await self.conn.request(post(self.path, body))
            except HttpError:
                if not w.stopping:
                    st.error("connection lost")
                    w.failed(self.index)
                return
            if resp.status != 200:
                st.error(f"HTTP {resp.status}")
                await asyncio.sleep(0.5)
                continue
            st.answers += 1
            data = resp.body
            st.bytes_in += len(data)
            empty = self.process(data, resp.at)
            if first:
                first = False
                w.note_first_answer(resp.at - sent, empty)
            if resp.at >= w.next_report:
                w.report()

    def process(self, data: bytes, now: float) -> bool:
        """Account for one get_events answer; True when it was empty."""
        st = self.w.stats
        if not data.startswith(RESULT_PREFIX):
            try:
                value = loads(data)
                code = value.get("error", {}).get("code")
            except (ValueError, AttributeError):
                code = "unparsable"
            st.error(f"rpc {code}")
            if code == 1001:
                self.w.failed(self.index)
            return True
        if data.startswith(b"[]", len(RESULT_PREFIX)):
            st.empty_answers += 1
            return True
        self.account(data, 0, len(data), now)
        return False


class NchanSubscriber(MarkedEvents):
    """One nchan long-poll subscriber on one channel."""

    def __init__(self, w: "Worker", index: int) -> None:
        self.w = w
        self.index = index
        self.conn: HttpConn | None = None
        self.last = w.cfg["n_base"]
        self.channel = HELD_CHANNEL if w.cfg["mode"] == "held" else FAN_CHANNEL

    async def setup(self) -> None:
        self.conn = await connect(self.w.host, self.w.port)

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()

    async def run(self) -> None:
        w, st = self.w, self.w.stats
        base = b"GET /sub/%s HTTP/1.1\r\nHost: 127.0.0.1\r\n" % self.channel.encode()
        cond = b""
        first = True
        while not w.stopping:
            sent = time.time()
            if first:
                w.note_first_poll(sent)
            try:
                resp = await self.conn.request(base + cond + b"\r\n")
            except HttpError:
                if not w.stopping:
                    st.error("connection lost")
                    w.failed(self.index)
                return
            empty = True
            if resp.status == 200:
                st.answers += 1
                st.bytes_in += len(resp.body)
                h = resp.headers
                cond = b"If-Modified-Since: %s\r\nIf-None-Match: %s\r\n" % (
                    h.get(b"last-modified", b""), h.get(b"etag", b""))
                self.account(resp.body, 0, len(resp.body), resp.at)
                empty = False
            elif resp.status in (304, 408):
                st.answers += 1
                st.empty_answers += 1
            else:
                st.error(f"HTTP {resp.status}")
                await asyncio.sleep(0.5)
            if first:
                first = False
                w.note_first_answer(resp.at - sent, empty)
            if resp.at >= w.next_report:
                w.report()


# ---------------------------------------------------------------------------
# streaming subscribers: Server-Sent Events and WebSocket
#
# A raw non-blocking socket per session: set up with the loop's sock_* calls
# (HTTP requests, the WebSocket upgrade, the JSON-RPC or Engine.IO exchange
# on the socket), then read by the worker's epoll loop: one ``recv_into`` a
# buffer shared by the process per readiness, and ``on_data(buffer, end,
# now)`` walks what arrived in place. Bytes of an incomplete frame wait in
# ``rest`` for the next read.

RECV_BUF = bytearray(1 << 18)
STREAM_PATH = "/stream/%s"        # nchan: EventSource and WebSocket on one location
SOCKETIO_PATH = b"/socket.io/?EIO=4&transport=websocket"
WS_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


def ws_frame(payload: bytes, opcode: int = 1) -> bytes:
    """One final client frame, masked as RFC 6455 requires of a client: a
    random key, the XOR as one big integer (no per-byte loop). A client sends
    a few frames per connection (the set-up calls, pongs): not a cost that
    shows."""
    n = len(payload)
    if n < 126:
        head = bytes((0x80 | opcode, 0x80 | n))
    elif n < 65536:
        head = bytes((0x80 | opcode, 0x80 | 126)) + n.to_bytes(2, "big")
    else:
        head = bytes((0x80 | opcode, 0x80 | 127)) + n.to_bytes(8, "big")
    mask = os.urandom(4)
    if n:
        m = (mask * (n // 4 + 1))[:n]
        payload = (int.from_bytes(payload, "big") ^ int.from_bytes(m, "big")).to_bytes(n, "big")
    return head + mask + payload


class ChunkParser:
    """An incremental decoder of ``Transfer-Encoding: chunked``."""

    __slots__ = ("buf", "left", "ended")

    def __init__(self) -> None:
        self.buf = bytearray()
        self.left = 0       # bytes of the current chunk still to come; -1: its CRLF
        self.ended = False

    def feed(self, data, end: int | None = None) -> bytes:
        """Decode ``data[:end]``; the payload bytes it completes."""
        if self.ended:       # the last chunk's trailer: nothing more to decode
            return b""
        buf = self.buf
        buf += data if end is None else memoryview(data)[:end]
        out = []
        pos, end = 0, len(buf)
        while pos < end:
            if self.left > 0:
                take = min(self.left, end - pos)
                out.append(bytes(buf[pos:pos + take]))
                pos += take
                self.left -= take
                if self.left == 0:
                    self.left = -1
            elif self.left == -1:
                if end - pos < 2:
                    break
                pos += 2
                self.left = 0
            else:
                eol = buf.find(b"\r\n", pos)
                if eol < 0:
                    break
                size = int(bytes(buf[pos:eol]).split(b";", 1)[0], 16)
                pos = eol + 2
                if size == 0:
                    self.ended = True
                    pos = end
                    break
                self.left = size
        del buf[:pos]
        return b"".join(out)


class StreamSubscriber:
    """One streaming subscriber; the subclasses are the transport (SSE,
    WebSocket) and the server (which set-up, which events)."""

    def __init__(self, w: "Worker", index: int) -> None:
        self.w = w
        self.index = index
        self.sock: socket.socket | None = None
        self.recv_into: Callable[[bytearray], int] | None = None
        self.buf = bytearray()               # set-up: bytes read, not yet used
        self.rest = b""                      # streaming: an incomplete frame
        self.pending = b""                   # read with the set-up, for the first read
        self.sid = ""
        self.ack = 0
        self.last_n: dict[bytes, int] = {}   # pushengine: object id -> last n
        self.base = self.last = w.cfg["n_base"]   # the peers: the last n
        self.reading = False
        self.done: asyncio.Future | None = None
        self.channel = HELD_CHANNEL if w.cfg["mode"] == "held" else FAN_CHANNEL

    # -- set-up ----------------------------------------------------------------------
    async def setup(self) -> None:
        loop = asyncio.get_running_loop()
        w = self.w
        delay = 0.05
        for attempt in range(5):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setblocking(False)
            try:
                await loop.sock_connect(sock, (w.host, w.port))
                break
            except OSError:
                sock.close()
                if attempt == 4:
                    raise
                await asyncio.sleep(delay)
                delay *= 2
        self.sock = sock
        await self.open()

    async def open(self) -> None:
        """The transport's and the server's set-up on the connected socket."""
        raise NotImplementedError

    def host_header(self) -> bytes:
        return b"Host: %s:%d\r\n" % (self.w.host.encode(), self.w.port)

    async def _recv(self) -> None:
        data = await asyncio.get_running_loop().sock_recv(self.sock, 65536)
        if not data:
            raise HttpError("connection closed during set-up")
        self.buf += data

    async def _head(self) -> tuple[int, dict[bytes, bytes]]:
        """Read an HTTP response head; what follows stays in ``buf``."""
        while (end := self.buf.find(b"\r\n\r\n")) < 0:
            await self._recv()
        status, headers = parse_head(bytes(self.buf[:end]))
        del self.buf[:end + 4]
        return status, headers

    async def _http(self, raw: bytes) -> bytes:
        """One request on the connection; the response body (200 only)."""
        await asyncio.get_running_loop().sock_sendall(self.sock, raw)
        status, headers = await self._head()
        if b"content-length" in headers:
            n = int(headers[b"content-length"])
            while len(self.buf) < n:
                await self._recv()
            body = bytes(self.buf[:n])
            del self.buf[:n]
        else:
            while (parsed := _dechunk(self.buf, 0)) is None:
                await self._recv()
            body, consumed = parsed
            del self.buf[:consumed]
        if status != 200:
            raise HttpError(f"HTTP {status}: {body[:100]!r}")
        return body

    # -- receiving ---------------------------------------------------------------------
    def start(self) -> None:
        """Read and count from the end of the set-up on: the worker reads the
        stream (on its event loop while other sessions are set up, then in
        ``stream_loop``), so that a server's pings are answered however long
        the set-up of the rest takes."""
        self.done = asyncio.get_running_loop().create_future()
        self.streaming()
        if self.pending:
            self.w.stats.bytes_in += len(self.pending)
            self.feed(self.pending, time.time())
            self.pending = b""
        if not self.done.done():
            self.w.watch(self)
            self.reading = True

    async def run(self) -> None:
        """Until the stream ends or the worker stops."""
        self.w.note_first_poll(time.time())
        await self.done

    def streaming(self) -> None:
        """Switch from set-up to counting (before the first read)."""

    def feed(self, data: bytes, now: float) -> None:
        """Bytes read outside the epoll loop (after set-up, in tests)."""
        if self.rest:
            data = self.rest + data
            self.rest = b""
        if data:
            self.on_data(data, len(data), now)

    def on_data(self, data, end: int, now: float) -> None:
        """Account for ``data[:end]``, read at ``now``; keep an incomplete
        frame's bytes in ``rest``. ``data`` may be the shared buffer: nothing
        may hold on to it."""
        raise NotImplementedError

    def lost(self, why: str) -> None:
        if self.reading:
            self.w.unwatch(self)
            self.reading = False
        if not self.w.stopping:
            self.w.stats.error(why)
            self.w.stats.streams_closed += 1
            self.w.failed(self.index)
        if self.done is not None and not self.done.done():
            self.done.set_result(None)

    def close(self) -> None:
        if self.reading:
            self.w.unwatch(self)
            self.reading = False
        if self.sock is not None:
            self.sock.close()
        if self.done is not None and not self.done.done():
            self.done.set_result(None)


class WsStream(StreamSubscriber):
    """A WebSocket: the upgrade, then the server's frames (never masked)
    walked in place. A complete text or binary frame goes to
    ``on_message(data, a, b, now)`` (set-up: collected in ``inbox``;
    streaming: ``message``); pings are answered, a close ends the stream."""

    def __init__(self, w: "Worker", index: int) -> None:
        super().__init__(w, index)
        self.parts: list[bytes] = []      # a fragmented message so far
        self.closed: int | None = None
        self.inbox: deque[bytes] = deque()
        self.on_message: Callable[[Any, int, int, float], int] = self._collect

    async def upgrade(self, path: bytes) -> None:
        loop = asyncio.get_running_loop()
        key = base64.b64encode(os.urandom(16))
        await loop.sock_sendall(self.sock, b"GET %s HTTP/1.1\r\n%sUpgrade: websocket\r\n"
                                b"Connection: Upgrade\r\nSec-WebSocket-Key: %s\r\n"
                                b"Sec-WebSocket-Version: 13\r\n\r\n"
                                % (path, self.host_header(), key))
        status, headers = await self._head()
        accept = base64.b64encode(hashlib.sha1(key + WS_GUID).digest())
        if status != 101 or headers.get(b"sec-websocket-accept") != accept:
            raise HttpError(f"WebSocket upgrade refused: HTTP {status}")
        if self.buf:
            self.feed(bytes(self.buf), time.time())
            self.buf.clear()

    def _collect(self, data, a: int, b: int, now: float) -> int:
        self.inbox.append(bytes(data[a:b]))
        return 0

    async def next_message(self) -> bytes:
        """The next data message during set-up."""
        while not self.inbox:
            if self.closed is not None:
                raise HttpError(f"WebSocket closed ({self.closed}) during set-up")
            data = await asyncio.get_running_loop().sock_recv(self.sock, 65536)
            if not data:
                raise HttpError("connection closed during set-up")
            self.feed(data, time.time())
        return self.inbox.popleft()

    async def send_text(self, payload: bytes) -> None:
        await asyncio.get_running_loop().sock_sendall(self.sock, ws_frame(payload))

    def send_now(self, frame: bytes) -> None:
        """A small frame from the read loop (a pong): no waiting."""
        try:
            self.sock.send(frame)
        except OSError:
            pass

    def streaming(self) -> None:
        self.on_message = self.message
        while self.inbox:     # whatever came after the set-up's last answer
            msg = self.inbox.popleft()
            self.message(msg, 0, len(msg), time.time())

    def message(self, data, a: int, b: int, now: float) -> int:
        """One data message while streaming; the number of events it held."""
        raise NotImplementedError

    def on_data(self, data, end: int, now: float) -> None:
        pos = 0
        got = 0
        while end - pos >= 2:
            b0 = data[pos]
            ln = data[pos + 1]
            if ln < 126:
                a = pos + 2
            elif ln == 126:
                if end - pos < 4:
                    break
                ln = (data[pos + 2] << 8) | data[pos + 3]
                a = pos + 4
            elif ln == 127:
                if end - pos < 10:
                    break
                ln = int.from_bytes(data[pos + 2:pos + 10], "big")
                a = pos + 10
            else:
                self.lost("a masked frame from the server")
                return
            b = a + ln
            if b > end:
                break
            if b0 == 0x81 or b0 == 0x82:
                got += self.on_message(data, a, b, now)
            else:
                got += self.control(b0, data, a, b, now)
                if self.closed is not None:
                    return
            pos = b
        if pos < end:
            self.rest = bytes(data[pos:end])
        if got:
            self.w.stats.answers += 1

    def control(self, b0: int, data, a: int, b: int, now: float) -> int:
        """A fragment or a control frame."""
        op = b0 & 0x0F
        if op in (0, 1, 2):
            self.parts.append(bytes(data[a:b]))
            if b0 & 0x80:
                msg = b"".join(self.parts)
                self.parts = []
                return self.on_message(msg, 0, len(msg), now)
        elif op == 9:
            self.send_now(ws_frame(bytes(data[a:b]), 10))
        elif op == 8:
            self.closed = int.from_bytes(data[a:a + 2], "big") if b - a >= 2 else 1005
            if self.reading:
                self.lost(f"WebSocket closed by the server ({self.closed})")
        return 0                 # op 10 (pong): nothing to do


class SseStream(StreamSubscriber):
    """An EventSource stream: ``GET`` with ``Accept: text/event-stream``, the
    body possibly chunked; whole messages (up to the last blank line) are
    counted, the rest waits in ``text``."""

    def __init__(self, w: "Worker", index: int) -> None:
        super().__init__(w, index)
        self.chunks: ChunkParser | None = None
        self.text = b""

    async def request_stream(self, path: bytes) -> None:
        await asyncio.get_running_loop().sock_sendall(
            self.sock, b"GET %s HTTP/1.1\r\n%sAccept: text/event-stream\r\n"
            b"Cache-Control: no-cache\r\n\r\n" % (path, self.host_header()))
        status, headers = await self._head()
        if status != 200:
            raise HttpError(f"HTTP {status}")
        if headers.get(b"transfer-encoding", b"").lower() == b"chunked":
            self.chunks = ChunkParser()
        self.pending = bytes(self.buf)
        self.buf = bytearray()

    def on_data(self, data, end: int, now: float) -> None:
        if self.chunks is not None:
            text = self.chunks.feed(data, end)
            if self.chunks.ended:
                self.lost("event stream ended by the server")
        else:
            text = bytes(data[:end])
        if self.text:
            text = self.text + text
        cut = text.rfind(b"\n\n")
        if cut < 0:
            self.text = text
            return
        self.text = text[cut + 2:]
        st = self.w.stats
        if text[0] == 58 or b"\n:" in text:    # comments: the servers' pings
            st.pings += text.count(b": ping", 0, cut) + text.count(b": hi", 0, cut)
        if self.account(text, 0, cut + 2, now):
            st.answers += 1

    def account(self, data, a: int, b: int, now: float) -> int:
        raise NotImplementedError


class EngineSse(EngineEvents, SseStream):
    """pushengine, SSE: ``session.create`` and ``stream.subscribe_public_live``
    over ``POST /api/jsonrpc``, then ``GET /api/events?session=SID`` on the
    same connection (``id: seq`` / ``data: event``)."""

    async def open(self) -> None:
        self.sid = loads(await self._http(post("/api/jsonrpc",
                                               rpc_body("session.create", []))))["result"]
        calls = (user_calls(self.index, self.w.cfg["subs"]) if self.w.cfg["mode"] == "users"
                 else [("stream.subscribe_public_live", [1])])
        for method, params in calls:
            r = loads(await self._http(post(rpc_path(self.sid), rpc_body(
                method, [self.sid, *params]))))
            if "result" not in r:
                raise HttpError(f"subscribe failed: {r.get('error')}")
            self.note_state(r["result"][1])
        await self.request_stream(b"/api/events?session=" + self.sid.encode())

    def slow_events(self, raw: bytes) -> list:
        return [loads(line[5:]) for line in raw.split(b"\n") if line.startswith(b"data:")]


class EngineWs(EngineEvents, WsStream):
    """pushengine, WebSocket: ``GET /api/ws``, then ``session.create`` and the
    subscription as JSON-RPC on the socket; events arrive as ``events``
    notifications."""

    def __init__(self, w: "Worker", index: int) -> None:
        super().__init__(w, index)
        self.calls = 0

    async def open(self) -> None:
        await self.upgrade(b"/api/ws")
        self.sid = await self.call("session.create", [])
        calls = (user_calls(self.index, self.w.cfg["subs"]) if self.w.cfg["mode"] == "users"
                 else [("stream.subscribe_public_live", [1])])
        for method, params in calls:
            self.note_state((await self.call(method, [self.sid, *params]))[1])

    async def call(self, method: str, params: list) -> Any:
        """A JSON-RPC call on the socket; its result (events may come first)."""
        self.calls += 1
        await self.send_text(rpc_body(method, params, self.calls))
        while True:
            msg = await self.next_message()
            if msg.startswith(NOTIFICATION_PREFIX):
                self.account(msg, 0, len(msg), time.time())
                continue
            value = loads(msg)
            if isinstance(value, dict) and value.get("id") == self.calls:
                if "error" in value:
                    raise HttpError(f"RPC error {value['error']}")
                return value["result"]

    def slow_events(self, raw: bytes) -> list:
        value = loads(raw)
        if isinstance(value, dict) and value.get("method") == "events":
            return value.get("params", [])
        return []

    message = EngineEvents.account    # a notification's events (answers have none)


class NchanSse(MarkedEvents, SseStream):
    """nchan, EventSource: ``GET /stream/CH``; nothing to set up."""

    async def open(self) -> None:
        await self.request_stream((STREAM_PATH % self.channel).encode())


class NchanWs(MarkedEvents, WsStream):
    """nchan, WebSocket: ``GET /stream/CH`` upgraded; one message per frame."""

    many = False

    async def open(self) -> None:
        await self.upgrade((STREAM_PATH % self.channel).encode())

    message = MarkedEvents.account


class SocketioWs(MarkedEvents, WsStream):
    """Socket.IO 4 (Engine.IO v4) over WebSocket: the open packet, ``40``
    (connect to the default namespace), ``420["subscribe","CH"]`` and its
    ack ``430[true]``; then ``42["m",{...}]`` per message, one a frame. An
    Engine.IO ping (``2``) is answered with a pong (``3``) at once: the
    server drops a socket that misses one."""

    many = False

    async def open(self) -> None:
        await self.upgrade(SOCKETIO_PATH)
        msg = await self.next_message()
        if not msg.startswith(b"0{"):
            raise HttpError(f"no Engine.IO open packet: {msg[:80]!r}")
        await self.send_text(b"40")
        msg = await self.next_message()
        if not msg.startswith(b"40"):
            raise HttpError(f"Socket.IO connect refused: {msg[:80]!r}")
        await self.send_text(b'420["subscribe","%s"]' % self.channel.encode())
        msg = await self.next_message()
        if msg != b"430[true]":
            raise HttpError(f"subscribe not acknowledged: {msg[:80]!r}")

    async def next_message(self) -> bytes:
        while True:
            msg = await super().next_message()
            if msg != b"2":
                return msg
            self.w.stats.pings += 1
            await self.send_text(b"3")

    def message(self, data, a: int, b: int, now: float) -> int:
        c = data[a]
        if c == 52 and b - a > 1:                   # "4": a Socket.IO packet
            if data[a + 1] == 50:                   # "42": an event
                got = self.account(data, a, b, now)
                if got:
                    return got
            elif data[a + 1] == 49:                 # "41": disconnected
                self.lost("Socket.IO disconnect from the server")
                return 0
            self.w.stats.other_events += 1
        elif c == 50 and b - a == 1:                # "2": an Engine.IO ping
            self.w.stats.pings += 1
            self.send_now(ws_frame(b"3"))
        elif c == 49:                               # "1": an Engine.IO close
            self.lost("Engine.IO close from the server")
        elif c != 54:                               # "6": noop
            self.w.stats.other_events += 1
        return 0


STREAM_CLASSES: dict[tuple[str, str], type[StreamSubscriber]] = {
    (PUSHENGINE, "sse"): EngineSse, (PUSHENGINE, "ws"): EngineWs,
    (NCHAN, "sse"): NchanSse, (NCHAN, "ws"): NchanWs,
    (SOCKETIO, "ws"): SocketioWs,
}


def subscriber_class(cfg: dict) -> type:
    """What holds one session of this run."""
    if cfg["transport"] != "longpoll":
        return STREAM_CLASSES[(cfg["target"], cfg["transport"])]
    return NchanSubscriber if cfg["target"] == NCHAN else Session


class Worker:
    """A process holding a share of the sessions."""

    def __init__(self, cfg: dict, indices: range, conn) -> None:
        self.cfg = cfg
        self.indices = indices
        self.pipe = conn
        u = urlsplit(cfg["url"])
        self.host, self.port = u.hostname, u.port or 80
        self.stats = Stats()
        self.hist = Histogram()
        self.lat: list[float] = []           # latencies not yet in hist
        self.stopping = False
        self.sessions: list = []
        self.stop_event: asyncio.Event | None = None
        self.go: asyncio.Event | None = None
        self.next_report = time.time() + 1.0
        self.streaming = cfg["transport"] != "longpoll"
        self.streams: dict[int, StreamSubscriber] = {}   # fd -> the stream read on it
        self.epoll: Any = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.bytes_read = 0                  # by the stream reads, not yet in stats

    # -- streams: read on the event loop during set-up, then by an epoll loop ---------
    def watch(self, s: StreamSubscriber) -> None:
        fd = s.sock.fileno()
        s.recv_into = s.sock.recv_into
        self.streams[fd] = s
        if self.epoll is not None:
            self.epoll.register(fd, select.EPOLLIN)
        elif self.loop is not None:
            self.loop.add_reader(fd, self.read, s)

    def unwatch(self, s: StreamSubscriber) -> None:
        fd = s.sock.fileno()
        if self.streams.pop(fd, None) is None:
            return
        if self.epoll is not None:
            try:
                self.epoll.unregister(fd)
            except (OSError, ValueError):
                pass
        elif self.loop is not None:
            self.loop.remove_reader(fd)

    def read(self, s: StreamSubscriber) -> None:
        """One read of a ready stream into the shared buffer, and its bytes
        walked in place (an incomplete frame's bytes first)."""
        try:
            n = s.recv_into(RECV_BUF)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as e:
            s.lost(f"connection lost: {e.strerror}")
            return
        if not n:
            s.lost("connection closed by the server")
            return
        self.bytes_read += n
        if s.rest:
            data = s.rest + RECV_BUF[:n]
            s.rest = b""
            s.on_data(data, len(data), time.time())
        else:
            s.on_data(RECV_BUF, n, time.time())

    def stream_loop(self) -> None:
        """Read every stream until the coordinator says stop.

        Once all streams are set up nothing else happens in this process but
        reading them, so a plain epoll loop replaces the event loop: per
        readiness one ``recv_into`` the process's buffer and one call that
        walks the bytes in place (no Handle, callback, copy or JSON per
        read). Blocks the event loop on purpose; returns when "stop" arrives.
        """
        ep = select.epoll()
        pipe_fd = self.pipe.fileno()
        ep.register(pipe_fd, select.EPOLLIN)
        for fd in self.streams:
            if self.loop is not None:
                self.loop.remove_reader(fd)
            ep.register(fd, select.EPOLLIN)
        self.epoll = ep
        streams = self.streams
        interval = self.cfg["report_interval"]
        read = self.read
        try:
            while True:
                for fd, _ in ep.poll(interval, 1024):
                    s = streams.get(fd)
                    if s is not None:
                        read(s)
                    elif fd == pipe_fd:
                        try:
                            cmd = self.pipe.recv()
                        except EOFError:
                            cmd = "stop"
                        if cmd == "stop":
                            return
                if time.time() >= self.next_report:
                    self.report()
        finally:
            self.epoll = None
            ep.close()

    def report(self) -> None:
        self.next_report = time.time() + self.cfg["report_interval"]
        self.pipe.send(self.snapshot())

    def note_first_poll(self, at: float) -> None:
        st = self.stats
        st.polling += 1
        if st.first_poll_at_min is None or at < st.first_poll_at_min:
            st.first_poll_at_min = at
        if st.first_poll_at_max is None or at > st.first_poll_at_max:
            st.first_poll_at_max = at

    def note_first_answer(self, duration: float, empty: bool) -> None:
        st = self.stats
        st.first_answered += 1
        t = self.cfg["timeout"]
        if not empty or duration < t - 0.5:
            st.first_early += 1
        elif duration > t + 2.0:
            st.first_late += 1
        else:
            st.first_on_time += 1
        st.first_min = duration if st.first_min is None else min(st.first_min, duration)
        st.first_max = duration if st.first_max is None else max(st.first_max, duration)

    def failed(self, index: int) -> None:
        self.stats.failed_sessions.append(index)

    async def one(self, index: int, gate: asyncio.Semaphore) -> None:
        s = subscriber_class(self.cfg)(self, index)
        async with gate:
            try:
                await s.setup()
            except (OSError, HttpError, ValueError, KeyError, TypeError) as e:
                self.stats.setup_errors += 1
                self.stats.error(f"setup: {type(e).__name__}: {str(e)[:80]}")
                self.failed(index)
                s.close()
                return
        self.sessions.append(s)
        self.stats.connected += 1
        if self.streaming:
            s.start()
        # every session polls once all are set up: the polls start together
        await self.go.wait()
        if self.cfg["mode"] == "answers":
            await self.answers(s)
        else:
            await s.run()

    async def answers(self, s) -> None:
        """Poll back to back, never acknowledging: every answer carries the
        same events waiting (pushengine: get_events [sid, 0, 0]; nchan: the
        same If-Modified-Since again)."""
        st = self.stats
        if self.cfg["target"] == NCHAN:
            raw = (b"GET /sub/%s HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                   b"If-Modified-Since: Thu, 01 Jan 1970 00:00:01 GMT\r\n"
                   b"If-None-Match: 0\r\n\r\n" % FAN_CHANNEL.encode())
        else:
            raw = post(rpc_path(s.sid), rpc_body("session.get_events", [s.sid, 0, 0]))
        self.note_first_poll(time.time())
        while not self.stopping:
            try:
                resp = await s.conn.request(raw)
            except HttpError:
                if not self.stopping:
                    st.error("connection lost")
                return
            st.answers += 1
            st.bytes_in += len(resp.body)
            if resp.status != 200 or len(resp.body) < 100:
                st.empty_answers += 1   # no events waiting: not what is measured
                if st.empty_answers == 1:
                    st.error(f"answer without events: {resp.status} {resp.body[:80]!r}")
            if resp.at >= self.next_report:
                self.report()

    def snapshot(self, final: bool = False) -> dict:
        ru = resource.getrusage(resource.RUSAGE_SELF)
        self.stats.cpu = ru.ru_utime + ru.ru_stime
        self.stats.bytes_in += self.bytes_read
        self.bytes_read = 0
        # the worst latency since the last report: when in the run the slow
        # events came (a stall shows as one or two bad reports)
        worst = max(self.lat) if self.lat else None
        self.hist.add_many(self.lat)
        self.lat.clear()
        return {"kind": "final" if final else "stats", "at": time.time(),
                "stats": asdict(self.stats), "hist": self.hist.to_dict(), "worst": worst}

    async def main(self) -> None:
        loop = self.loop = asyncio.get_running_loop()
        self.stop_event = asyncio.Event()
        self.go = asyncio.Event()
        loop.add_reader(self.pipe.fileno(), self._command)
        gate = asyncio.Semaphore(self.cfg["connect_concurrency"])
        tasks = [asyncio.create_task(self.one(i, gate)) for i in self.indices]
        milestones = 0   # 1: all set up; 2: all polling
        while not self.stop_event.is_set():
            try:
                await asyncio.wait_for(self.stop_event.wait(),
                                       self.cfg["report_interval"] if milestones == 2 else 0.05)
            except asyncio.TimeoutError:
                pass
            st = self.stats
            reached = milestones
            if st.connected + st.setup_errors >= len(self.indices):
                reached = 1
                if st.polling >= st.connected:
                    reached = 2
            # report at once when a milestone is reached, else every interval
            # (a busy worker also reports from its answer loop: Session.run)
            if reached > milestones or time.time() >= self.next_report:
                milestones = reached
                self.report()
            if milestones == 2 and self.streaming and self.go.is_set():
                loop.remove_reader(self.pipe.fileno())
                self.stream_loop()
                self.stop_event.set()
        self.stopping = True
        for s in self.sessions:
            s.close()
        await asyncio.sleep(0.05)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self.pipe.send(self.snapshot(final=True))

    def _command(self) -> None:
        try:
            cmd = self.pipe.recv()
        except EOFError:
            cmd = "stop"
        if cmd == "stop":
            self.stop_event.set()
        elif cmd == "go":
            self.go.set()


def worker_process(cfg: dict, indices: range, conn) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise_nofile()
    w = Worker(cfg, indices, conn)
    run_loop(w.main())
    conn.close()


# ---------------------------------------------------------------------------
# publishers (in the coordinating process)


class Publisher:
    """Makes changes at ``rate`` a second and sends them in order.

    pushengine: changes are stamped (``sent_at``) when they are made, queued,
    and sent by one request at a time as a JSON array of everything queued (at
    most ``--max-batch`` changes): a backend that cannot publish faster than
    the engine takes them batches, and the wait counts in the latency. With
    ``rate`` 0, batches of ``--batch`` changes are sent back to back.
    nchan and Socket.IO take one message per request (``POST /pub/CH``): they
    are pipelined (``--inflight``) on one connection, which keeps their order,
    each stamped when it was due (``_pipelined``).
    """

    def __init__(self, cfg: dict) -> None:
        self.cfg = cfg
        u = urlsplit(cfg["url"])
        self.host, self.port = u.hostname, u.port or 80
        self.published = 0          # changes sent
        self.requests = 0
        self.accepted = 0
        self.errors = 0
        self.latency = Histogram()  # publish request round trip
        self.final_n: dict[int, int] = {}
        self.rng = random.Random(7)
        self.started_at = self.ended_at = 0.0
        self.last_sent_at = 0.0     # the last change sent (ended_at: its answer too)
        self.queue: deque[bytes] = deque()
        self.users = cfg["sessions"] * cfg["subs"]

    def change(self, now: float) -> bytes:
        """The next change: the shared object's next n, or a random user's."""
        base = self.cfg["n_base"]
        if self.cfg["mode"] == "fanout":
            n = self.final_n[0] = self.final_n.get(0, base) + 1
            if self.cfg["target"] in PEERS:
                return peer_message(n, now)
            return fan_change(n, now)
        u = self.rng.randrange(self.users)
        n = self.final_n[u] = self.final_n.get(u, base) + 1
        return user_change(u, n, now)

    def user_batch(self, now: float) -> bytes:
        return b"[" + b",".join(self.change(now) for _ in range(self.cfg["batch"])) + b"]"

    async def generate(self, duration: float) -> None:
        """Queue ``rate`` changes a second for ``duration`` seconds."""
        loop = asyncio.get_running_loop()
        rate = self.cfg["rate"]
        t0 = loop.time()
        made = 0
        while True:
            now = loop.time()
            if now - t0 >= duration:
                break
            due = int((now - t0) * rate) + 1 - made
            stamp = time.time()
            for _ in range(due):
                self.queue.append(self.change(stamp))
            made += max(0, due)
            self.wake.set()
            await asyncio.sleep(max(0.001, t0 + made / rate - loop.time()))
        self.generating = False
        self.wake.set()

    async def run(self, duration: float) -> None:
        cfg = self.cfg
        conn = await connect(self.host, self.port)
        self.started_at = time.time()
        try:
            if cfg["target"] in PEERS:
                await self._pipelined(conn, duration)
            else:
                await self._batched(conn, duration)
        finally:
            self.ended_at = time.time()
            conn.close()

    async def _batched(self, conn: HttpConn, duration: float) -> None:
        cfg = self.cfg
        self.wake = asyncio.Event()
        self.generating = cfg["rate"] > 0
        gen = asyncio.create_task(self.generate(duration)) if self.generating else None
        end = asyncio.get_running_loop().time() + duration
        limit = cfg["max_batch"]
        while True:
            if gen is None:
                if asyncio.get_running_loop().time() >= end:
                    break
                for _ in range(cfg["batch"]):
                    self.queue.append(self.change(time.time()))
            elif not self.queue:
                if not self.generating:
                    break
                self.wake.clear()
                await self.wake.wait()
                continue
            count = min(limit, len(self.queue))
            body = b"[" + b",".join(self.queue.popleft() for _ in range(count)) + b"]"
            sent = self.last_sent_at = time.time()
            fut = conn.request(post("/api/publish", body))
            self.published += count
            self.requests += 1
            try:
                await fut
            except HttpError:
                pass
            self._done(fut, sent, count)
        if gen is not None:
            await gen

    async def _pipelined(self, conn: HttpConn, duration: float) -> None:
        """One message per request, pipelined. At a set rate every change of
        the ``duration`` is sent, each stamped when it was due: a peer that
        takes publishes slower than they are made (``--inflight`` requests
        waiting) is sent the rest late, and the wait counts in the latency,
        as the engine's queued publishes do."""
        cfg = self.cfg
        rate = cfg["rate"]
        interval = 1.0 / rate if rate > 0 else 0.0
        total = int(round(duration * rate)) if rate > 0 else None
        pending: set[asyncio.Future] = set()
        loop = asyncio.get_running_loop()
        t0, wall0 = loop.time(), time.time()
        k = 0
        while True:
            now = loop.time()
            if (k >= total) if total is not None else (now - t0 >= duration):
                break
            due = t0 + k * interval
            if due > now:
                await asyncio.sleep(due - now)
            while len(pending) >= cfg["inflight"]:
                _, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            sent = time.time()
            made = wall0 + k * interval if total is not None else sent
            fut = conn.request(post(f"/pub/{FAN_CHANNEL}", self.change(made)))
            fut.add_done_callback(lambda f, sent=sent: self._done(f, sent, 1))
            pending.add(fut)
            self.last_sent_at = sent
            self.published += 1
            self.requests += 1
            k += 1
        if pending:
            await asyncio.wait(pending, timeout=30)

    def _done(self, fut: asyncio.Future, sent: float, count: int) -> None:
        if fut.cancelled() or fut.exception() is not None:
            self.errors += 1
            return
        resp = fut.result()
        self.latency.add(resp.at - sent)
        if 200 <= resp.status < 300:
            self.accepted += count
        else:
            self.errors += 1


class AmqpPublisher(Publisher):
    """The same changes, published to the AMQP fanout exchange with pika."""

    async def run(self, duration: float) -> None:
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, self._blocking, duration)

    def _blocking(self, duration: float) -> None:
        import pika  # optional bench dependency
        cfg = self.cfg
        params = pika.URLParameters(cfg["amqp"])
        connection = pika.BlockingConnection(params)
        channel = connection.channel()
        # transient messages: the broker's disk is not what is measured
        props = pika.BasicProperties(content_type="application/json", delivery_mode=1)
        rate = cfg["rate"]
        interval = cfg["batch"] / rate if rate > 0 else 0.0
        self.started_at = time.time()
        t0 = time.monotonic()
        k = 0
        try:
            while True:
                now = time.monotonic()
                if now >= t0 + duration or (cfg["count"] and self.published >= cfg["count"]):
                    break
                due = t0 + k * interval
                if due > now:
                    time.sleep(due - now)
                body = self.user_batch(time.time())
                if cfg["batch"] == 1:
                    body = body[1:-1]
                channel.basic_publish(cfg["exchange"], "", body, props)
                self.published += cfg["batch"]
                self.accepted += cfg["batch"]
                self.requests += 1
                k += 1
                if k % 200 == 0:
                    connection.process_data_events(0)
        finally:
            self.ended_at = time.time()
            connection.close()


class SqlPublisher(Publisher):
    """The changes as SQL commits (``--publish sql``): a process of its own
    (psycopg2, autocommit) runs one ``UPDATE streams SET n = n + 1, sent_at =
    <now> WHERE id = ...`` per transaction at ``rate`` a second, on the
    shared row (``fanout``) or on a random user's row (``users``); the node
    learns of them through the WAL (the relay ``pushengine-cdc`` and the
    broker, or its own ``--feed-url``). ``sent_at`` is the time the statement
    left, so a latency runs from the commit to the client; the commit's
    round trip is ``publish_latency``. Each statement returns the row's
    ``n``, the accounting's final values. A writer that cannot keep the rate
    sends the rest back to back: ``publish_rate`` then shows it."""

    def __init__(self, cfg: dict) -> None:
        super().__init__(cfg)
        self.writer_cpu = 0.0

    async def run(self, duration: float) -> None:
        ctx = multiprocessing.get_context("fork")
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=sql_writer, args=(self.cfg, duration, child), daemon=True)
        self.started_at = time.time()
        proc.start()
        child.close()
        try:
            out = await asyncio.get_running_loop().run_in_executor(None, parent.recv)
        finally:
            proc.join(10)
            parent.close()
        self.started_at = out["started_at"]
        self.ended_at = out["ended_at"]
        self.last_sent_at = out["last_sent_at"]
        self.published = self.accepted = self.requests = out["committed"]
        self.errors = out["errors"]
        self.final_n = out["final_n"]
        self.latency = Histogram.from_dict(out["latency"])
        self.writer_cpu = out["cpu"]


def sql_rows(cfg: dict) -> list[tuple[int, int]]:
    """(row id, accounting key) of every row the SQL publisher updates."""
    if cfg["mode"] == "fanout":
        return [(OBJ_ID, 0)]
    return [(USER_OBJ_BASE + u, u) for u in range(cfg["sessions"] * cfg["subs"])]


def sql_writer(cfg: dict, duration: float, pipe) -> None:
    """The SQL publisher's process: commits until ``duration`` is over, then
    sends its figures on ``pipe``."""
    import psycopg2
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    rows = sql_rows(cfg)
    rng = random.Random(7)
    hist = Histogram()
    final_n: dict[int, int] = {}
    committed = errors = 0
    conn = psycopg2.connect(cfg["database"])
    conn.autocommit = True          # one statement, one transaction
    cur = conn.cursor()
    statement = "UPDATE streams SET n = n + 1, sent_at = %s WHERE id = %s RETURNING n"
    rate = cfg["rate"]
    started = time.time()
    last_sent = started
    t0 = time.monotonic()
    k = 0
    try:
        while True:
            now = time.monotonic()
            if now - t0 >= duration:
                break
            if rate > 0:
                due = t0 + k / rate
                if due > now:
                    time.sleep(due - now)
            oid, key = rows[rng.randrange(len(rows))] if len(rows) > 1 else rows[0]
            sent = last_sent = time.time()
            try:
                cur.execute(statement, (sent, oid))
                got = cur.fetchone()
            except psycopg2.Error:
                errors += 1
                if conn.closed:
                    conn = psycopg2.connect(cfg["database"])
                    conn.autocommit = True
                    cur = conn.cursor()
                k += 1
                continue
            hist.add(time.time() - sent)
            if got is None:
                errors += 1          # the row is missing: nothing was published
            else:
                final_n[key] = got[0]
                committed += 1
            k += 1
    finally:
        ended = time.time()
        ru = resource.getrusage(resource.RUSAGE_SELF)
        conn.close()
        pipe.send({"started_at": started, "ended_at": ended, "last_sent_at": last_sent,
                   "committed": committed, "errors": errors, "final_n": final_n,
                   "latency": hist.to_dict(), "cpu": ru.ru_utime + ru.ru_stime})
        pipe.close()


def seed_sql(cfg: dict) -> None:
    """Every row the SQL publisher updates, at ``n`` = this run's base, before
    anyone subscribes (inserted when missing: the shared row first in the
    limit-1 view, each user's row public and live). The table is the
    caller's: ``streams`` with ``n bigint`` and ``sent_at double precision``
    beside the built-in views' columns. Waits ``--seed-wait`` seconds for
    the change to reach the node through the WAL."""
    import psycopg2
    from psycopg2.extras import execute_values
    now = time.time()
    base = cfg["n_base"]
    values = []
    for oid, key in sql_rows(cfg):
        fan = cfg["mode"] == "fanout"
        values.append((oid, base, now, -1 if fan else key, True, True,
                       FAN_CREATED_AT if fan else CREATED_AT))
    conn = psycopg2.connect(cfg["database"])
    with conn, conn.cursor() as cur:
        execute_values(cur, "INSERT INTO streams (id, n, sent_at, user_id, live, public, "
                            "created_at) VALUES %s ON CONFLICT (id) DO UPDATE SET "
                            "n = EXCLUDED.n, sent_at = EXCLUDED.sent_at, "
                            "user_id = EXCLUDED.user_id, live = true, public = true, "
                            "created_at = EXCLUDED.created_at", values, page_size=5000)
    conn.close()
    time.sleep(cfg["seed_wait"])


def fan_change(n: int, now: float) -> bytes:
    return (b'{"type":"Stream","action":"upsert","obj":{"id":%d,"n":%d,"sent_at":%r,'
            b'"user_id":-1,"live":true,"public":true,"created_at":"%s"}}'
            % (OBJ_ID, n, now, FAN_CREATED_AT.encode()))


def user_change(user: int, n: int, now: float) -> bytes:
    return (b'{"type":"Stream","action":"upsert","obj":{"id":%d,"n":%d,"sent_at":%r,'
            b'"user_id":%d,"live":true,"public":true,"created_at":"%s"}}'
            % (USER_OBJ_BASE + user, n, now, user, CREATED_AT.encode()))


# ---------------------------------------------------------------------------
# the coordinator


def fmt_s(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v * 1000:.1f}ms" if v < 1 else f"{v:.2f}s"


class CpuSeries:
    """CPU seconds of the loadgen's processes, sampled from /proc: each
    process's share of a core over any window of the run."""

    def __init__(self, processes: list[tuple[str, int]]) -> None:
        self.processes = processes            # (role, pid)
        self.samples: list[tuple[float, list[float | None]]] = []

    def sample(self) -> None:
        self.samples.append((time.time(), [proc_cpu_seconds(pid) for _, pid in self.processes]))

    def percent(self, start: float | None, end: float | None) -> list[float | None]:
        """Per process, percent of one core between two instants."""
        out: list[float | None] = []
        pts = [s for s in self.samples if start is not None and end is not None
               and start <= s[0] <= end]
        for i in range(len(self.processes)):
            vals = [(t, c[i]) for t, c in pts if c[i] is not None]
            if len(vals) < 2 or vals[-1][0] <= vals[0][0]:
                out.append(None)
            else:
                out.append(100.0 * (vals[-1][1] - vals[0][1]) / (vals[-1][0] - vals[0][0]))
        return out


class Coordinator:
    def __init__(self, cfg: dict) -> None:
        self.cfg = cfg
        self.snapshots: dict[int, dict] = {}
        self.finals: dict[int, dict] = {}
        # per worker (at, events received so far), from its reports
        self.series: dict[int, list[tuple[float, int]]] = {}
        # (at, the worst latency of the events in that report), every worker
        self.worst: list[tuple[float, float]] = []
        self.phases: dict[str, float] = {}
        self.publisher: Publisher | None = None
        self.cpu: CpuSeries | None = None
        self.tty = sys.stderr.isatty()
        self._last_line = 0.0
        self.label = cfg.get("label") or f"{cfg['target']} {cfg['mode']} {cfg['sessions']}"

    def mark(self, phase: str) -> None:
        """Note a phase; the driver reads these lines to time its samples."""
        self.phases[phase] = time.time()
        if self.cpu is not None:
            self.cpu.sample()
        if self.cfg.get("phase_lines"):
            print(f"PHASE {phase} {self.phases[phase]:.3f}", flush=True)

    # -- figures across workers -----------------------------------------------------
    def total(self, name: str, source: dict | None = None) -> Any:
        src = source if source is not None else self.snapshots
        return sum(s["stats"][name] for s in src.values())

    def hist(self, source: dict | None = None) -> Histogram:
        h = Histogram()
        for s in (source if source is not None else self.snapshots).values():
            h.merge(s["hist"])
        return h

    def status_line(self, force: bool = False) -> None:
        now = time.time()
        if not force and now - self._last_line < (1.0 if self.tty else 5.0):
            return
        self._last_line = now
        if not self.snapshots:
            return
        h = self.hist()
        pub = ""
        if self.publisher is not None and self.publisher.started_at:
            sent = self.publisher.published
            span = max(1e-3, (self.publisher.ended_at or now) - self.publisher.started_at)
            pub = f" | published {sent:,} ({sent / span:,.0f}/s)"
        errors = sum(sum(s["stats"]["errors"].values()) for s in self.snapshots.values())
        line = (f"[{self.label}] connected {self.total('connected'):,}/{self.cfg['sessions']:,}"
                f" | answers {self.total('answers'):,} | events {self.total('events'):,}"
                f" | p50 {fmt_s(h.percentile(50))} p99 {fmt_s(h.percentile(99))}"
                f" | gaps {self.total('gap_events'):,} dups {self.total('duplicates'):,}"
                f" errors {errors:,}{pub}")
        if self.tty:
            sys.stderr.write("\r\x1b[K" + line[:200])
        else:
            sys.stderr.write(line + "\n")
        sys.stderr.flush()

    # -- the run ----------------------------------------------------------------------
    def spawn(self) -> None:
        cfg = self.cfg
        ctx = multiprocessing.get_context("fork")
        n, w = cfg["sessions"], cfg["workers"]
        self.procs = []
        self.pipes = []
        for i in range(w):
            indices = range(i * n // w, (i + 1) * n // w)
            parent, child = ctx.Pipe()
            p = ctx.Process(target=worker_process, args=(cfg, indices, child), daemon=True)
            p.start()
            child.close()
            self.procs.append(p)
            self.pipes.append(parent)
        self.cpu = CpuSeries([("coordinator", os.getpid())] +
                             [(f"worker {i}", p.pid) for i, p in enumerate(self.procs)])

    def _on_pipe(self, i: int) -> None:
        try:
            msg = self.pipes[i].recv()
        except (EOFError, OSError):
            asyncio.get_running_loop().remove_reader(self.pipes[i].fileno())
            return
        self.snapshots[i] = msg
        if msg["kind"] == "final":
            self.finals[i] = msg
        self.series.setdefault(i, []).append((msg["at"], msg["stats"]["events"]))
        if msg.get("worst") is not None:
            self.worst.append((msg["at"], msg["worst"]))

    async def sample_cpu(self, every: float = 0.25) -> None:
        while True:
            self.cpu.sample()
            await asyncio.sleep(every)

    async def wait_for(self, cond, seconds: float, step: float = 0.2) -> bool:
        deadline = time.time() + seconds
        while time.time() < deadline:
            if cond():
                return True
            self.status_line()
            await asyncio.sleep(step)
        return cond()

    async def run(self) -> dict:
        sampler = asyncio.create_task(self.sample_cpu())
        try:
            return await self._run()
        finally:
            sampler.cancel()

    async def _run(self) -> dict:
        cfg = self.cfg
        loop = asyncio.get_running_loop()
        for i, p in enumerate(self.pipes):
            loop.add_reader(p.fileno(), self._on_pipe, i)
        self.mark("start")
        n = cfg["sessions"]

        def set_up() -> bool:
            return (len(self.snapshots) == len(self.pipes) and
                    self.total("connected") + self.total("setup_errors") >= n)
        await self.wait_for(set_up, cfg["setup_timeout"], step=0.05)
        self.mark("set_up")
        if cfg["mode"] == "answers":
            await self.queue_waiting_events()
        for p in self.pipes:
            p.send("go")
        await self.wait_for(lambda: self.total("polling") >= self.total("connected"), 60,
                            step=0.05)
        self.mark("connected")
        self.status_line(force=True)

        if cfg["mode"] == "answers":
            await asyncio.sleep(cfg["duration"])
            self.mark("answers_end")
        elif cfg["mode"] == "held" and cfg["transport"] != "longpoll":
            # streams: held open and idle for --timeout seconds; the server
            # has taken the last of them a little after they were set up
            self.phases["idle_from"] = self.phases["connected"] + 2.0
            self.phases["idle_to"] = self.phases["connected"] + cfg["timeout"]
            await self.wait_for(lambda: False, cfg["timeout"])
            self.mark("answered")
        elif cfg["mode"] == "held":
            first_min = min((s["stats"]["first_poll_at_min"] or time.time()
                             for s in self.snapshots.values()), default=time.time())
            # the server parks the last polls a little after they were sent
            self.phases["idle_from"] = self.phases["connected"] + 2.0
            self.phases["idle_to"] = max(self.phases["idle_from"],
                                         first_min + cfg["timeout"] - 0.5)
            await self.wait_for(lambda: self.total("first_answered") >= self.total("connected"),
                                cfg["timeout"] + 15 + max(0.0, first_min - time.time()))
            self.mark("answered")
        else:
            await asyncio.sleep(cfg["settle"])
            self.publisher = (AmqpPublisher(cfg) if cfg["mode"] == "amqp" else
                              SqlPublisher(cfg) if cfg.get("publish") == "sql" else Publisher(cfg))
            self.mark("publish_start")
            task = asyncio.create_task(self.publisher.run(cfg["duration"]))
            while not task.done():
                self.status_line()
                await asyncio.sleep(0.2)
            await task
            self.mark("publish_end")
            expected = self.expected()
            progress = [self.total("events"), time.time()]

            def drained() -> bool:
                got = self.total("events")
                if got != progress[0]:
                    progress[:] = [got, time.time()]
                return got >= expected or time.time() - progress[1] > cfg["quiet"]
            await self.wait_for(drained, cfg["drain"])
            self.mark("drained")
        self.status_line(force=True)
        if self.tty:
            sys.stderr.write("\n")
        for p in self.pipes:
            try:
                p.send("stop")
            except OSError:
                pass
        await self.wait_for(lambda: len(self.finals) == len(self.pipes), 30)
        self.mark("end")
        for p in self.procs:
            p.join(5)
        return self.result()

    async def queue_waiting_events(self, count: int = 10) -> None:
        """``count`` changes of the shared object: every session has them waiting."""
        cfg = self.cfg
        u = urlsplit(cfg["url"])
        conn = await connect(u.hostname, u.port or 80)
        base = cfg["n_base"]
        for n in range(base + 1, base + 1 + count):
            if cfg["target"] in PEERS:
                req = post(f"/pub/{FAN_CHANNEL}", peer_message(n, time.time()))
            else:
                req = post("/api/publish", fan_change(n, time.time()))
            await conn.request(req)
        conn.close()
        await asyncio.sleep(0.5)

    def failed(self) -> set[int]:
        out: set[int] = set()
        for s in self.snapshots.values():
            out.update(s["stats"]["failed_sessions"])
        return out

    def expected(self) -> int:
        cfg, pub = self.cfg, self.publisher
        if pub is None:
            return 0
        ok = cfg["sessions"] - len(self.failed())
        base = cfg["n_base"]
        if cfg["mode"] == "fanout":
            return (pub.final_n.get(0, base) - base) * ok
        k, failed, fn = cfg["subs"], self.failed(), pub.final_n
        return sum(fn.get(u, base) - base for i in range(cfg["sessions"]) if i not in failed
                   for u in range(i * k, i * k + k))

    def cumulative(self, at: float) -> float:
        """Events received by every worker up to one instant, each worker's
        reports interpolated."""
        total = 0.0
        for pts in self.series.values():
            i = bisect.bisect_right(pts, at, key=lambda p: p[0])
            if i == 0:
                continue
            if i == len(pts):
                total += pts[-1][1]
                continue
            (t0, e0), (t1, e1) = pts[i - 1], pts[i]
            total += e0 + (e1 - e0) * (at - t0) / (t1 - t0)
        return total

    def window_rate(self, start: float, end: float) -> float | None:
        """Events received per second between two instants."""
        if not self.series or end <= start:
            return None
        return (self.cumulative(end) - self.cumulative(start)) / (end - start)

    def peak_rate(self, start: float, end: float, width: float = 2.0,
                  step: float = 0.25) -> float | None:
        """The highest events per second over any ``width`` seconds between
        two instants: deliveries per second at saturation."""
        if end - start < width:
            return self.window_rate(start, end)
        best = 0.0
        t = start
        while t + width <= end:
            best = max(best, (self.cumulative(t + width) - self.cumulative(t)) / width)
            t += step
        return best

    def loadgen_cpu(self, start: float | None, end: float | None) -> list[dict[str, Any]]:
        setup = self.cpu.percent(self.phases.get("start"), self.phases.get("connected"))
        run = self.cpu.percent(start, end)
        return [{"role": role, "pid": pid, "cpu_pct": pct, "setup_cpu_pct": s}
                for (role, pid), pct, s in zip(self.cpu.processes, run, setup)]

    def result(self) -> dict:
        cfg = self.cfg
        src = self.finals or self.snapshots
        h = self.hist(src)
        t = lambda name: self.total(name, src)  # noqa: E731
        errors: dict[str, int] = {}
        for s in src.values():
            for k, v in s["stats"]["errors"].items():
                errors[k] = errors.get(k, 0) + v
        res: dict[str, Any] = {
            "target": cfg["target"], "mode": cfg["mode"], "transport": cfg["transport"],
            "sessions": cfg["sessions"], "streams_closed": t("streams_closed"),
            "subs": cfg["subs"] if cfg["mode"] in ("users", "amqp") else 1,
            "rate": cfg["rate"], "batch": cfg["batch"], "duration": cfg["duration"],
            "timeout": cfg["timeout"], "workers": cfg["workers"],
            "event_loop": event_loop_name(),
            "phases": self.phases, "connected": t("connected"),
            "setup_errors": t("setup_errors"),
            "setup_seconds": self.phases["set_up"] - self.phases["start"],
            "poll_start_seconds": self.phases["connected"] - self.phases["set_up"],
            "answers": t("answers"), "empty_answers": t("empty_answers"),
            "events": t("events"), "duplicates": t("duplicates"), "gap_events": t("gap_events"),
            "resets": t("resets"), "pings": t("pings"), "other_events": t("other_events"),
            "bytes_in": t("bytes_in"), "errors": errors, "latency": h.summary(),
            "loadgen_cpu_seconds": t("cpu"),
        }
        last_event = max((s["stats"]["last_event_at"] for s in src.values()), default=0.0)
        # the window whose loadgen CPU says whether the run measured the loadgen
        ph = self.phases
        if cfg["mode"] == "answers":
            window = (ph["connected"], ph["answers_end"])
        elif cfg["mode"] == "held":
            window = (ph["connected"], ph["answered"])
        else:
            window = (ph["publish_start"], max(ph["publish_end"], min(last_event, ph["drained"])))
        procs = self.loadgen_cpu(*window)
        measured = [p["cpu_pct"] for p in procs if p["cpu_pct"] is not None]
        setup = [p["setup_cpu_pct"] for p in procs if p["setup_cpu_pct"] is not None]
        res.update({
            "loadgen_processes": procs,
            "loadgen_cpu_pct": sum(measured) if measured else None,
            "loadgen_cpu_max_pct": max(measured) if measured else None,
            "loadgen_bound": bool(measured) and max(measured) > LOADGEN_BOUND_PCT,
            "loadgen_bound_pct": LOADGEN_BOUND_PCT,
            # the set-up's time is the loadgen's when it was the busy side
            "setup_loadgen_bound": bool(setup) and max(setup) > LOADGEN_BOUND_PCT,
        })
        if cfg["mode"] == "held" and cfg["transport"] != "longpoll":
            res["held"] = {"streams": True, "open": t("connected") - t("streams_closed"),
                           "closed": t("streams_closed"),
                           "seconds": self.phases["answered"] - self.phases["connected"]}
        elif cfg["mode"] == "held":
            firsts = [s["stats"] for s in src.values()]
            res["held"] = {
                "answered": t("first_answered"), "on_time": t("first_on_time"),
                "early": t("first_early"), "late": t("first_late"),
                "min": min((f["first_min"] for f in firsts if f["first_min"] is not None),
                           default=None),
                "max": max((f["first_max"] for f in firsts if f["first_max"] is not None),
                           default=None)}
        if cfg["mode"] == "answers":
            span = self.phases["answers_end"] - self.phases["connected"]
            res["answers_per_s"] = (t("answers") - t("empty_answers")) / span
            res["answer_bytes"] = t("bytes_in") / max(1, t("answers"))
        pub = self.publisher
        if pub is not None:
            # changes sent per second: until the last was sent (not answered),
            # over at least the publishing time asked for
            span = max(1e-6, (pub.last_sent_at or pub.ended_at) - pub.started_at)
            if cfg["rate"] > 0:
                span = max(span, cfg["duration"])
            expected = self.expected()
            res.update({
                "published": pub.published, "publish_accepted": pub.accepted,
                "publish_errors": pub.errors, "publish_requests": pub.requests,
                "publish_rate": pub.published / span,
                "publish_latency": pub.latency.summary(),
                "publisher": "amqp" if cfg["mode"] == "amqp" else cfg.get("publish", "http"),
                "writer_cpu_pct": (100.0 * pub.writer_cpu / max(1e-6, pub.ended_at -
                                                                pub.started_at)
                                   if isinstance(pub, SqlPublisher) else None),
                "expected": expected, "lost": max(0, expected - t("events")),
                "offered_per_s": expected / span,
                "last_event_at": last_event,
                "events_per_s_publishing": self.window_rate(ph["publish_start"],
                                                            ph["publish_end"]),
                # seconds from the first change, and the worst latency of
                # the events each report carried (about one a second per worker)
                "worst_by_report": [(round(at - pub.started_at, 2), worst)
                                    for at, worst in sorted(self.worst)
                                    if at >= pub.started_at],
                "answers_per_s": None, "events_per_s": None, "delivered_per_s": None,
                "delivered_per_s_peak": None, "saturated": None,
            })
        if pub is not None and last_event > pub.started_at:
            # from the first change made to the last event received: answers
            # with events, and distinct events, per second
            active = last_event - pub.started_at
            res["active_seconds"] = active
            res["answers_per_s"] = (t("answers") - t("empty_answers")) / active
            res["events_per_s"] = res["delivered_per_s"] = t("events") / active
            res["delivered_per_s_peak"] = self.peak_rate(pub.started_at, last_event)
            # the last event came after the last change by this much: a server
            # that keeps up delivers within its latency, one that falls behind
            # drains its backlog
            res["backlog_seconds"] = last_event - (pub.last_sent_at or pub.ended_at)
            # fell behind: delivered at least 10 % under what was offered
            # (the span stretched past the publishing time by the backlog)
            res["saturated"] = res["delivered_per_s"] < 0.9 * res["offered_per_s"]
        return res


def make_config(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--target", choices=list(TARGETS), default=PUSHENGINE)
    p.add_argument("--url", default="http://127.0.0.1:8080")
    p.add_argument("--mode", choices=["held", "fanout", "users", "amqp", "answers"],
                   default="fanout")
    p.add_argument("--transport", choices=["longpoll", "sse", "ws"], default="longpoll",
                   help="how sessions receive events (sse, ws: held and fanout modes)")
    p.add_argument("--sessions", type=int, default=100)
    p.add_argument("--subs", type=int, default=50, help="user views per session (users, amqp)")
    p.add_argument("--rate", type=float, default=10.0,
                   help="changes per second (0: as fast as the server takes them)")
    p.add_argument("--batch", type=int, default=1,
                   help="changes per AMQP message; with --rate 0, per POST")
    p.add_argument("--max-batch", type=int, default=1000,
                   help="most changes in one POST /api/publish (the queue is sent in batches)")
    p.add_argument("--duration", type=float, default=10.0, help="seconds of publishing")
    p.add_argument("--count", type=int, default=0,
                   help="publish at most this many changes (0: no limit; amqp)")
    p.add_argument("--timeout", type=float, default=20.0,
                   help="get_events timeout, s (held streams: how long they are held)")
    p.add_argument("--workers", type=int, default=0,
                   help="loadgen processes holding the sessions (0: two)")
    p.add_argument("--inflight", type=int, default=64,
                   help="nchan and Socket.IO publish requests in flight (pipelined)")
    p.add_argument("--connect-concurrency", type=int, default=128,
                   help="sessions each worker sets up at once")
    p.add_argument("--setup-timeout", type=float, default=120.0)
    p.add_argument("--settle", type=float, default=1.0, help="seconds between setup and publish")
    p.add_argument("--drain", type=float, default=20.0, help="longest wait for the last events")
    p.add_argument("--quiet", type=float, default=5.0,
                   help="stop draining after this many seconds without an event")
    p.add_argument("--publish", choices=["http", "sql"], default="http",
                   help="fanout, users: changes by POST /api/publish (http) or by SQL "
                        "commits to --database (sql: one UPDATE per transaction; the node "
                        "follows the WAL)")
    p.add_argument("--database", default="",
                   help="--publish sql: postgresql:// URL of the database whose streams "
                        "table the node reads")
    p.add_argument("--seed-wait", type=float, default=2.0,
                   help="--publish sql: seconds between seeding the rows and subscribing")
    p.add_argument("--amqp", default="amqp://guest:guest@127.0.0.1:5672/")
    p.add_argument("--exchange", default="pushengine.changes")
    p.add_argument("--report-interval", type=float, default=1.0,
                   help="seconds between the workers' reports to the coordinator")
    p.add_argument("--label", default="")
    p.add_argument("--json-out", default="")
    p.add_argument("--phase-lines", action="store_true",
                   help="print 'PHASE name time' lines on stdout as the run goes")
    a = p.parse_args(argv)
    if a.target == NCHAN and a.mode not in ("held", "fanout", "answers"):
        p.error("nchan has the held, fanout and answers modes only")
    if a.target == SOCKETIO and (a.mode not in ("held", "fanout") or a.transport != "ws"):
        p.error("Socket.IO has the held and fanout modes over --transport ws only")
    if a.transport != "longpoll" and a.mode not in ("held", "fanout") and not (
            a.mode == "users" and a.target == PUSHENGINE):
        p.error("--transport sse and ws have the held and fanout modes only "
                "(and users on pushengine)")
    if a.publish == "sql" and (a.target != PUSHENGINE or a.mode not in ("fanout", "users")
                               or not a.database or a.rate <= 0):
        p.error("--publish sql needs pushengine, the fanout or users mode, --database "
                "and a --rate above 0")
    cfg = {k.replace("-", "_"): v for k, v in vars(a).items()}
    if cfg["workers"] <= 0:
        cfg["workers"] = 2
    # every n this run publishes is above those of earlier runs on the same server
    cfg["n_base"] = int(time.time() * 1000)
    cfg["workers"] = min(cfg["workers"], max(1, a.sessions))
    return cfg


def seed_fanout(cfg: dict) -> None:
    """Put the shared object (n = 0) in the limit-1 view before anyone subscribes."""
    if cfg["target"] != PUSHENGINE or cfg["mode"] not in ("fanout", "held", "answers"):
        return
    req = urllib.request.Request(cfg["url"] + "/api/publish",
                                 fan_change(cfg["n_base"], time.time()),
                                 headers={"Content-Type": "application/json"})
    urllib.request.urlopen(req, timeout=10).read()


def run(cfg: dict) -> dict:
    """Run one load (also used in process by the driver and the tests)."""
    raise_nofile()
    if cfg.get("publish") == "sql":
        seed_sql(cfg)
    else:
        seed_fanout(cfg)
    c = Coordinator(cfg)
    c.spawn()
    try:
        return run_loop(c.run())
    finally:
        for p in c.procs:
            if p.is_alive():
                p.terminate()
                p.join(5)


def main(argv: list[str] | None = None) -> None:
    cfg = make_config(argv)
    # stopped by the driver: end the workers too (run's finally)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    result = run(cfg)
    text = json.dumps(result, indent=2)
    if cfg["json_out"]:
        with open(cfg["json_out"], "w") as f:
            f.write(text)
    else:
        print(text)


if __name__ == "__main__":
    main()
