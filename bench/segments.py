"""Segment upload throughput (SPEC section 15): rows per second on a UTF-8
file of phones and emails, and the memory an upload takes.

    .venv/bin/python bench/segments.py [--rows 1000000] [--repeat 3]
        [--http] [--redis redis://127.0.0.1:6379/9] [--big-mib 1024]

- the reader (segments/parse.py) into a sink that only counts (the parser's
  own cost), and into the in-process store (a set);
- ``--http``: end to end, ``POST /api/segments/NAME`` to a ``twistd -n
  pushengine`` node (the body streamed from the file), into the in-process
  store, and with ``--redis URL`` into Redis (a throw-away key prefix,
  deleted afterwards); the node's peak RSS is read from /proc;
- ``--big-mib N``: one upload of an N MiB file (the same 100,000 contacts
  over and over, so that the segment stays small and what grows, if
  anything, is the upload's own memory) with the node's RSS before and after.

Every figure is the best of ``--repeat`` runs, with the spread (slowest).
"""
from __future__ import annotations

import argparse
import hashlib
import http.client
import os
import sys
import tempfile
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from pushengine.segments.parse import normalize_email, read_segment  # noqa: E402
from pushengine.segments.phones import normalize_phone  # noqa: E402
from pushengine.segments.store import MemorySegments  # noqa: E402


class Counting:
    def __init__(self) -> None:
        self.n = 0

    def add(self, chunk: list[bytes]) -> None:
        self.n += len(chunk)

    def total(self) -> int:
        return self.n


def write_file(path: str, rows: int, unique: int | None = None, mib: int | None = None) -> int:
    """``rows`` contacts (or, with ``mib``, ``unique`` contacts repeated to
    that size); returns the rows written."""
    with open(path, "w", encoding="utf-8") as f:
        f.write("phone,email\n")
        if mib is None:
            for i in range(rows):
                f.write(f"+7 999 {i:07d},User{i}@Example.com\n")
            return rows
        block = "".join(f"+7 999 {i:07d},User{i}@Example.com\n" for i in range(unique))
        # at most the size asked for: 1024 MiB is exactly --max-segment-body
        written, target, size = 0, mib << 20, len(block.encode("utf-8"))
        while f.tell() + size <= target:
            f.write(block)
            written += unique
        return written


def best(times: list[float], rows: int) -> str:
    fast, slow = min(times), max(times)
    return (f"{rows / fast:>10,.0f} rows/s (best of {len(times)}; slowest "
            f"{rows / slow:,.0f}; {fast:.1f}-{slow:.1f} s)")


def in_process(path: str, rows: int, repeat: int) -> None:
    for name, sink in (("reader, counting sink: ", Counting),
                       ("reader, in-process set:", lambda: MemorySegments().begin("b"))):
        times = []
        for _ in range(repeat):
            with open(path, "rb") as f:
                t = time.perf_counter()
                read_segment(f, sink(), minimum=1)
                times.append(time.perf_counter() - t)
        print(f"{name} {best(times, rows)}")
    sample = [f"+7 999 {i:07d}" for i in range(200_000)]
    t = time.perf_counter()
    for s in sample:
        normalize_phone(s)
    print(f"phone validation alone:  {len(sample) / (time.perf_counter() - t):>10,.0f} /s")
    emails = [f"User{i}@Example.com" for i in range(200_000)]
    t = time.perf_counter()
    for s in emails:
        hashlib.sha256(normalize_email(s).encode()).digest()
    print(f"email + SHA-256 alone:   {len(emails) / (time.perf_counter() - t):>10,.0f} /s")


def rss_kib(pid: int, field: str = "VmRSS") -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def upload(url: str, path: str, name: str) -> tuple[float, str]:
    """POST the file, streamed from disk; (seconds, answer)."""
    host, port = url.split("//", 1)[1].split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=3600)
    size = os.path.getsize(path)
    t = time.perf_counter()
    with open(path, "rb") as f:
        conn.request("POST", f"/api/segments/{name}", body=f,
                     headers={"Content-Length": str(size), "Content-Type": "text/csv"})
        answer = conn.getresponse().read().decode()
    seconds = time.perf_counter() - t
    conn.close()
    return seconds, answer


def over_http(path: str, rows: int, repeat: int, redis: str | None, big: str | None,
              big_rows: int) -> None:
    from bench.driver import EngineServer
    setups = [("in-process store", [])]
    prefix = f"segbench{uuid.uuid4().hex[:8]}:"
    if redis:
        sep = "&" if "?" in redis else "?"
        setups.append(("Redis", ["--redis", f"{redis}{sep}prefix={prefix}"]))
    for label, extra in setups:
        server = EngineServer(["--segment-min", "1", *extra]).start()
        try:
            pid = server.pids()[0]
            times = []
            for i in range(repeat):
                seconds, answer = upload(server.url, path, f"bench{i}")
                if '"valid"' not in answer:
                    raise RuntimeError(answer[:300])
                times.append(seconds)
            print(f"HTTP upload, {label + ':':<18} {best(times, rows)}; node peak RSS "
                  f"{rss_kib(pid, 'VmHWM') >> 10} MiB")
            if big is not None:
                before = rss_kib(pid)
                seconds, answer = upload(server.url, big, "big")
                if '"valid"' not in answer:
                    raise RuntimeError(answer[:300])
                print(f"  {os.path.getsize(big) >> 20} MiB upload ({big_rows:,} rows): "
                      f"{big_rows / seconds:,.0f} rows/s; node RSS {before >> 10} MiB before, "
                      f"{rss_kib(pid) >> 10} MiB after, peak {rss_kib(pid, 'VmHWM') >> 10} MiB")
        finally:
            server.stop()
            if extra:
                cleanup_redis(redis, prefix)


def cleanup_redis(url: str, prefix: str) -> None:
    from tests.cluster.resp import Resp
    host_port, _, db = url.split("//", 1)[1].partition("/")
    host, port = host_port.split(":")
    with Resp(host, int(port), int(db.split("?")[0] or 0)) as r:
        keys = r("KEYS", prefix + "*")
        if keys:
            r("UNLINK", *keys)      # freed in the background: no wait for large sets


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--http", action="store_true", help="end to end through a node")
    parser.add_argument("--redis", help="also into Redis (a throw-away prefix)")
    parser.add_argument("--big-mib", type=int, help="one upload of a file this large")
    args = parser.parse_args()
    tmp = tempfile.mkdtemp(prefix="segbench-")
    path = os.path.join(tmp, "contacts.csv")
    write_file(path, args.rows)
    print(f"{args.rows:,} rows, {os.path.getsize(path) / (1 << 20):.1f} MiB, UTF-8, "
          f"a phone and an email each")
    big, big_rows = None, 0
    try:
        in_process(path, args.rows, args.repeat)
        if args.big_mib:
            big = os.path.join(tmp, "big.csv")
            big_rows = write_file(big, 0, unique=100_000, mib=args.big_mib)
        if args.http or args.redis:
            over_http(path, args.rows, args.repeat, args.redis, big, big_rows)
    finally:
        for name in os.listdir(tmp):
            os.unlink(os.path.join(tmp, name))
        os.rmdir(tmp)


if __name__ == "__main__":
    main()
