"""Segment upload throughput (SPEC section 15): rows per second of the
reader (segments/parse.py) on a UTF-8 file of phones and emails.

    .venv/bin/python bench/segments.py [--rows 1000000]

Three figures: the reader into a sink that only counts (the parser's own
cost), into the in-process store (a set), and the parts: phone validation
alone and email normalization + SHA-256 alone.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import sys
import tempfile
import time
import tracemalloc

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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    args = parser.parse_args()
    rows = args.rows
    with tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False, encoding="utf-8") as f:
        f.write("phone,email\n")
        for i in range(rows):
            f.write(f"+7 999 {i:07d},User{i}@Example.com\n")
        path = f.name
    size = os.path.getsize(path)
    print(f"{rows:,} rows, {size / (1 << 20):.1f} MiB, UTF-8, a phone and an email each")
    try:
        tracemalloc.start()
        with open(path, "rb") as f:
            t = time.perf_counter()
            read_segment(f, Counting(), minimum=1)
            dt = time.perf_counter() - t
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        print(f"reader, counting sink:   {rows / dt:>10,.0f} rows/s  ({dt:.1f} s), "
              f"peak Python memory {peak / (1 << 20):.1f} MiB")
        with open(path, "rb") as f:
            t = time.perf_counter()
            counts = read_segment(f, MemorySegments().begin("b"), minimum=1)
            dt = time.perf_counter() - t
        print(f"reader, in-process set:  {rows / dt:>10,.0f} rows/s  ({dt:.1f} s), "
              f"{counts.valid:,} entries")
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
    finally:
        os.unlink(path)


if __name__ == "__main__":
    main()
