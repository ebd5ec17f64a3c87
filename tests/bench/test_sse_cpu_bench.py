"""bench/sse_cpu.py keeps working: a tiny run on each front prints its figure."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIGURE = re.compile(r"^sse (\w+): 20 streams x 5 events: (\d+\.\d+) us CPU per event per stream "
                    r"\(100 events written, (\d+) bytes each")


@pytest.mark.parametrize("front", ["fast", "twisted"])
def test_sse_cpu_prints_the_cpu_per_event(front: str) -> None:
    done = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "sse_cpu.py"),
                           "--streams", "20", "--events", "5", "--front", front],
                          check=True, capture_output=True, text=True, timeout=300)
    lines = done.stdout.splitlines()
    assert len(lines) == 1, done.stdout
    found = FIGURE.match(lines[0])
    assert found, lines[0]
    assert found.group(1) == front
    assert float(found.group(2)) > 0
    assert int(found.group(3)) > 100            # an SSE message: id, data, the event


def test_sse_cpu_refuses_an_empty_run() -> None:
    done = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "sse_cpu.py"),
                           "--streams", "0"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and "--streams" in done.stderr
