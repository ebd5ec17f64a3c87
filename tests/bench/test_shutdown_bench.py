"""bench/shutdown.py keeps working: a tiny run, every client let go without error."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

pytestmark = pytest.mark.e2e


def test_shutdown_bench_lets_every_client_go_and_prints_the_times() -> None:
    done = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "shutdown.py"),
                           "--clients", "30", "--shutdown-timeout", "5"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("shutdown: 30 clients held"), done.stdout
    assert lines[1] == "  long-poll: 10 answered [] (Connection: close)"
    assert lines[2] == "  SSE: 10 ended cleanly (going-away, last chunk)"
    assert lines[3] == "  WebSocket: 10 closed 1001"
    assert re.match(r"  SIGTERM to exit: \d+\.\d\d s; to the last client's end: \d+\.\d\d s; "
                    r"the node let every client go in \d+\.\d\d s", lines[4]), lines[4]
    assert lines[5] == "  errors: 0"


def test_shutdown_bench_refuses_too_few_clients() -> None:
    done = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "shutdown.py"),
                           "--clients", "2"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "--clients" in done.stderr
