"""bench/pg_e2e.py keeps working: a small run of each kind, nothing lost.

A private PostgreSQL cluster, the relay and a node from this checkout, the
loadgen committing through SQL (``--publish sql``), and the restart with a
private Redis; the RabbitMQ on 127.0.0.1:5672 carries a throw-away exchange.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.pgcluster import _bindir
from tests.services import require_program, require_service, unavailable

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_pg_e2e_bench_runs_small(tmp_path) -> None:
    require_service("RabbitMQ", "127.0.0.1", 5672)
    require_program("redis-server")
    if _bindir() is None:
        unavailable("PostgreSQL's programs (initdb, pg_ctl) are not installed")
    out = tmp_path / "e2e.json"
    done = subprocess.run(
        [sys.executable, os.path.join(ROOT, "bench", "pg_e2e.py"),
         "--scenarios", "users-longpoll,fanout-ws,restart", "--run", "users:ws:20:20",
         "--sessions", "20", "--rate", "20", "--fanout-sessions", "5", "--fanout-rate", "5",
         "--duration", "2", "--backoff-max", "1", "--json", str(out)],
        capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    r = json.loads(out.read_text())
    assert [c["label"] for c in r["commit"]] == ["users-longpoll", "fanout-ws",
                                                 "users-ws-20x20"]
    for run in r["commit"]:
        assert run["connected"] == run["sessions"], run
        assert run["committed"] > 0 and run["events"] == run["expected"] > 0, run
        assert run["lost"] == 0 and run["duplicates"] == 0, run
        assert run["p99"] is not None and run["cpu_pct"]["node"] is not None, run
    restart = r["restart"]
    assert restart["set_up"] == 20 and restart["state"] == 20, restart
    assert restart["ready_s"] > 0 and restart["last_s"] >= restart["first_s"], restart
