"""bench/answer_cost.py keeps working: a tiny run, alone and beside a baseline tree."""
from __future__ import annotations

import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "bench", "answer_cost.py")
ALONE = re.compile(r"^(µs CPU|Python calls) per .+: +(\d+\.\d)$")
BESIDE = re.compile(r"^(µs CPU|Python calls) per .+: baseline +(\d+\.\d), this tree +(\d+\.\d) "
                    r"\(×(\d+\.\d\d)\)$")


def run(*args: str) -> list[str]:
    done = subprocess.run([sys.executable, SCRIPT, "--requests", "100", "--polls", "5",
                           "--rounds", "1", *args], check=True, capture_output=True,
                          text=True, timeout=300, env=dict(os.environ, PYTHONPATH=ROOT))
    return done.stdout.splitlines()


def test_answer_cost_prints_six_figures() -> None:
    lines = run()
    assert lines[0].startswith("100 answers with events waiting, 5 polls woken")
    found = [ALONE.match(line) for line in lines[1:]]
    assert len(found) == 6 and all(found), lines
    assert all(float(m.group(2)) > 0 for m in found if m)


def test_answer_cost_measures_a_baseline_tree_alike() -> None:
    lines = run("--baseline", ROOT)
    found = [BESIDE.match(line) for line in lines[1:]]
    assert len(found) == 6 and all(found), lines
    for m in found:
        assert m is not None and float(m.group(2)) > 0 and float(m.group(3)) > 0
    # the same tree: the same count of calls, whatever the CPU does
    calls = [m for m in found if m is not None and m.group(1) == "Python calls"]
    assert all(abs(float(m.group(2)) - float(m.group(3))) <= 2.0 for m in calls), lines


def test_answer_cost_refuses_an_empty_run() -> None:
    done = subprocess.run([sys.executable, SCRIPT, "--requests", "0"], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 2 and "--requests" in done.stderr
