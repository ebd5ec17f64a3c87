"""bench/metrics_cost.py keeps working: a tiny run prints both figures."""
from __future__ import annotations

import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "bench", "metrics_cost.py")
FIGURE = re.compile(r"^µs CPU per (answer|woken poll): without histograms (\d+\.\d\d), "
                    r"with (\d+\.\d\d) \([+-]\d+\.\d\d µs, ×\d+\.\d{3}\)$")


def test_metrics_cost_prints_with_and_without() -> None:
    done = subprocess.run([sys.executable, SCRIPT, "--requests", "100", "--polls", "5",
                           "--rounds", "1"], check=True, capture_output=True, text=True,
                          timeout=300, env=dict(os.environ, PYTHONPATH=ROOT))
    lines = done.stdout.splitlines()
    assert lines[0].startswith("100 get_events answers with 10 events waiting")
    found = [FIGURE.match(line) for line in lines[1:]]
    assert len(found) == 2 and all(found), lines
    assert all(float(m.group(2)) > 0 and float(m.group(3)) > 0 for m in found if m)
