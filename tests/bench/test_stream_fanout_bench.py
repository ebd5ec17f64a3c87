"""bench/stream_fanout.py keeps working on both transports: a tiny run prints its figure."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.parametrize("transport", ["sse", "ws"])
def test_stream_fanout_runs_small(transport: str) -> None:
    done = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "stream_fanout.py"),
                           "--streams", "20", "--changes", "3", "--max-queue", "5",
                           "--transport", transport],
                          check=True, capture_output=True, text=True, timeout=300)
    found = re.match(rf"^{transport}: 20 streams x 3 changes: (\d+\.\d+) µs CPU per stream "
                     r"per event .*; (\d+\.\d+) bytes per event", done.stdout)
    assert found, done.stdout
    assert float(found.group(1)) > 0 and float(found.group(2)) > 100
