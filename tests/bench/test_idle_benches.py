"""The idle-stream benchmarks run and print their figures (tiny sizes)."""
from __future__ import annotations

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run(script: str, *args: str) -> str:
    env = dict(os.environ, PYTHONPATH=ROOT)
    done = subprocess.run([sys.executable, os.path.join(ROOT, "bench", script), *args],
                          capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_online_streams_compares_per_stream_counting_with_one_pass():
    out = run("online_streams.py", "--sessions", "200", "--keys", "3", "--periods", "1")
    assert "per stream" in out and "one pass" in out and "ratio" in out


def test_held_idle_reports_cpu_and_registry_operations_per_period():
    out = run("held_idle.py", "--sessions", "50", "--keys", "3", "--periods", "1")
    assert "50 idle streams" in out and "refreshes" in out
