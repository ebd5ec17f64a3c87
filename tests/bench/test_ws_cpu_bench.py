"""bench/ws_cpu.py keeps working: a tiny run, plain and deflated, prints its figure."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIGURE = re.compile(r"^ws (plain|deflate): 20 streams x 6 events \(batches of (\d+)\): "
                    r"(\d+\.\d+) us CPU per event per stream \(120 events written, "
                    r"(\d+) bytes per frame")


@pytest.mark.parametrize("argv, kind, batch", [
    ([], "plain", 1), (["--deflate"], "deflate", 1), (["--batch", "3"], "plain", 3)])
def test_ws_cpu_prints_the_cpu_per_event(argv: list[str], kind: str, batch: int) -> None:
    done = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "ws_cpu.py"),
                           "--streams", "20", "--events", "6", "--repeat", "2", *argv],
                          check=True, capture_output=True, text=True, timeout=300)
    lines = done.stdout.splitlines()
    assert len(lines) == 3, done.stdout
    for one in lines[:2]:
        found = FIGURE.match(one)
        assert found, one
        assert (found.group(1), int(found.group(2))) == (kind, batch)
        assert float(found.group(3)) > 0
        assert int(found.group(4)) > 60 * batch        # the notification and its events
    assert lines[2].startswith(f"ws {kind}: median of 2 runs: ")


def test_ws_cpu_refuses_an_empty_run() -> None:
    done = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "ws_cpu.py"),
                           "--streams", "0"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and "--streams" in done.stderr
