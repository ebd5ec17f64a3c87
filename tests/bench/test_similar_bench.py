"""bench/similar.py keeps working: a small run, its figures sane."""
from __future__ import annotations

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_similar_bench_runs_small(tmp_path) -> None:
    out = tmp_path / "similar.json"
    subprocess.run([sys.executable, os.path.join(ROOT, "bench", "similar.py"),
                    "--objects", "3000", "--views", "50", "--changes", "200",
                    "--queries", "20", "--json", str(out)],
                   check=True, capture_output=True, timeout=600)
    r = json.loads(out.read_text())
    assert r["build"]["objects"] == 3000 and r["index_memory"]["bytes_per_object"] > 0
    assert r["subscriptions"]["views"] == 50
    assert r["changes"]["all"]["n"] == 200
    assert r["precision_checked"] > 0
    for t in ("0.5", "0.7", "0.9"):
        assert r["recall"][t]["recall_t_plus_0.1"] in (None, 1.0) or \
            r["recall"][t]["recall_t_plus_0.1"] >= 0.9


def test_similar_bench_change_cost_runs_small(tmp_path) -> None:
    out = tmp_path / "cost.json"
    subprocess.run([sys.executable, os.path.join(ROOT, "bench", "similar.py"), "--change-cost",
                    "--objects", "2000", "--changes", "100", "--json", str(out)],
                   check=True, capture_output=True, timeout=600)
    r = json.loads(out.read_text())["change_cost"]
    assert r["objects"] == 2000 and r["first_subscription_ms"] > 0
    for phase in ("none", "one"):
        assert r[phase]["title_us"] > 0 and r[phase]["other_us"] > 0
