"""bench/cores.py's own logic, without servers: the configurations it is
given, each process's share of a window, the table of figures and ratios,
and nginx+nchan's configuration with more than one worker."""
from __future__ import annotations

import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench"))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import cores  # noqa: E402
import loadgen  # noqa: E402
import nchan as nchan_bench  # noqa: E402


def test_configurations_parsed_and_two_nodes_always_balanced():
    assert cores.parse_configs("pushengine:1, pushengine:2,nchan:1,nchan:2") == [
        ("pushengine", 1, False), ("pushengine", 2, True), ("nchan", 1, False),
        ("nchan", 2, False)]
    assert cores.parse_configs("pushengine:1+haproxy") == [("pushengine", 1, True)]
    labels = [cores.config_label(*c) for c in
              cores.parse_configs("pushengine:1,pushengine:1+haproxy,pushengine:3,nchan:2")]
    assert labels == ["pushengine:1", "pushengine:1+haproxy", "pushengine:3", "nchan:2"]
    for bad in ("socketio:1", "pushengine:0", "pushengine", "nchan:1+haproxy",
                "pushengine:1+nginx"):
        with pytest.raises(ValueError):
            cores.parse_configs(bad)


def test_each_process_share_of_a_window():
    # (time, {part: (RSS KiB, CPU seconds)}): node1 busy half a core, haproxy a tenth
    samples = [(t, {"node1": (1000 + 10 * t, 0.5 * t), "haproxy": (500, 0.1 * t)})
               for t in range(0, 11)]
    got = cores.component_figures(samples, 2, 8)
    assert got["node1"]["cpu_pct"] == pytest.approx(50.0)
    assert got["haproxy"]["cpu_pct"] == pytest.approx(10.0)
    # RSS at the end of the window, grown from the very first sample
    assert got["node1"]["rss_kb"] == 1080 and got["node1"]["rss_growth_kb"] == 80
    assert got["haproxy"]["rss_growth_kb"] == 0
    assert cores.component_figures(samples, 8, 2) == {}
    assert cores.component_figures(samples, None, 8) == {}
    assert cores.component_figures(samples, 2.5, 2.9) == {}   # fewer than two samples


def fanout(config: str, p99: float, cpu: float, bound: bool = False,
           haproxy: float | None = None) -> dict:
    r = {"name": "fanout-ws-9000-10/s", "group": "fanout", "config": config,
         "cpu_pct": cpu, "events_per_cpu_s": 90_000 / cpu,
         "loadgen": {"latency": {"p50": p99 / 3, "p99": p99}, "lost": 0,
                     "events_per_s": 90_000, "loadgen_cpu_pct": 40.0,
                     "loadgen_bound": bound}}
    if haproxy is not None:
        r["parts"] = {"node1": {"cpu_pct": cpu / 2}, "haproxy": {"cpu_pct": haproxy}}
    return r


def test_table_gives_two_to_one_and_engine_to_nchan_ratios():
    results = [fanout("pushengine:1", 0.400, 80.0), fanout("pushengine:2", 0.200, 120.0,
                                                           haproxy=30.0),
               fanout("nchan:1", 0.050, 20.0), fanout("nchan:2", 0.040, 25.0, bound=True),
               {"name": "answers-100", "group": "answers", "config": "pushengine:1",
                "error": "RuntimeError: no"}]
    rows = {(r["run"], r["figure"]): r for r in cores.table(results)}
    p99 = rows[("fanout-ws-9000-10/s", "p99 ms")]
    assert p99["values"] == {"pushengine:1": pytest.approx(400), "pushengine:2":
                             pytest.approx(200), "nchan:1": pytest.approx(50),
                             "nchan:2": pytest.approx(40)}
    assert p99["ratios"]["pushengine 2:1"] == pytest.approx(0.5)
    assert p99["ratios"]["nchan 2:1"] == pytest.approx(0.8)
    assert p99["ratios"]["pushengine/nchan, 1"] == pytest.approx(8.0)
    assert p99["ratios"]["pushengine/nchan, 2"] == pytest.approx(5.0)
    assert p99["bound"] == ["nchan:2"] and p99["failed"] == []
    # haproxy's CPU only where there is a haproxy: no ratio without both sides
    proxy = rows[("fanout-ws-9000-10/s", "haproxy CPU %")]
    assert proxy["values"]["pushengine:2"] == 30.0 and proxy["values"]["pushengine:1"] is None
    assert proxy["ratios"] == {}
    # nothing lost anywhere: no ratio of zeros
    assert rows[("fanout-ws-9000-10/s", "lost")]["ratios"] == {}
    # a run that failed everywhere is still a row, saying where it failed
    assert rows[("answers-100", "-")]["failed"] == ["pushengine:1"]


def test_the_table_prints_only_the_ratios_of_configurations_run(capsys):
    rows = cores.table([fanout("pushengine:1", 0.4, 80.0), fanout("pushengine:2", 0.2, 120.0)])
    cores.print_table(rows, ["pushengine:1", "pushengine:2"])
    out = capsys.readouterr().out
    head = next(line for line in out.splitlines() if line.startswith("| run"))
    assert "pushengine 2:1" in head and "nchan" not in head
    assert "| p99 ms | 400 | 200 | x0.50 |" in out


def test_nchan_with_two_workers_listens_with_reuseport(tmp_path):
    one = nchan_bench.render(8090, str(tmp_path), 20)
    two = nchan_bench.render(8090, str(tmp_path), 20, workers=2)
    assert "worker_processes 1;" in one and "reuseport" not in one
    assert "worker_processes 2;" in two
    assert "listen 127.0.0.1:8090 backlog=4096 reuseport;" in two
    assert "@WORKERS@" not in two and "@REUSEPORT@" not in two


def test_engine_calls_name_their_session_in_the_url():
    # what a balancer hashing on ?session= needs (deploy/haproxy.cfg.in)
    assert loadgen.rpc_path("abc") == "/api/jsonrpc?session=abc"
    raw = loadgen.post(loadgen.rpc_path("abc"), b"{}")
    assert raw.startswith(b"POST /api/jsonrpc?session=abc HTTP/1.1\r\n")
