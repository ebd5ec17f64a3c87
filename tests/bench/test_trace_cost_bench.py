"""bench/trace_cost.py keeps working: a tiny run prints every figure."""
from __future__ import annotations

import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "bench", "trace_cost.py")
FIGURE = re.compile(r"^µs CPU per (answer|woken poll): off (\d+\.\d\d), "
                    r"sampled 0\.01 (\d+\.\d\d) \([+-]\d+\.\d\d µs, ×\d+\.\d{3}\), "
                    r"sampled 1 (\d+\.\d\d) \([+-]\d+\.\d\d µs, ×\d+\.\d{3}\)$")
SPANS = re.compile(r"^spans at (0\.01|1): ([\d,]+) exported, ([\d,]+) dropped$")


def test_trace_cost_prints_off_and_both_ratios() -> None:
    done = subprocess.run([sys.executable, SCRIPT, "--requests", "100", "--polls", "5",
                           "--rounds", "1"], check=True, capture_output=True, text=True,
                          timeout=300, env=dict(os.environ, PYTHONPATH=ROOT))
    lines = done.stdout.splitlines()
    assert lines[0].startswith("100 get_events answers with 10 events waiting")
    found = [FIGURE.match(line) for line in lines[1:3]]
    assert all(found), lines
    assert all(float(m.group(n)) > 0 for m in found if m for n in (2, 3, 4))
    spans = [SPANS.match(line) for line in lines[3:5]]
    assert all(spans), lines
    # at 1 every call and change is a span: 100 answers, 5 polls a change, 5 changes
    assert spans[1] and int(spans[1].group(2).replace(",", "")) >= 100 + 5 * 5 + 5
