"""bench/cpucap.py against control-group trees laid out in a temporary
directory as cgroup v1 and v2 lay them out (the kernel's own files need root
and change the machine), and bench/routing.py's summary of a cluster run."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench"))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import cpucap  # noqa: E402
import routing  # noqa: E402


def v1_tree(root: Path) -> Path:
    cpu = root / "cpu"
    cpu.mkdir(parents=True)
    (cpu / "cpu.cfs_quota_us").write_text("-1")
    (cpu / "cgroup.procs").write_text("")
    return cpu


def v2_tree(root: Path, enabled: bool) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "cgroup.controllers").write_text("cpuset cpu io memory pids")
    (root / "cgroup.subtree_control").write_text("cpu memory" if enabled else "memory")
    (root / "cgroup.procs").write_text("")
    return root


def test_v1_quota_is_the_share_of_the_period_and_lifted_to_none(tmp_path):
    v1_tree(tmp_path)
    cap = cpucap.CpuCap("node-0", 5, root=tmp_path)
    group = tmp_path / "cpu" / "node-0"
    assert (group / "cpu.cfs_period_us").read_text() == str(cpucap.PERIOD_US)
    assert (group / "cpu.cfs_quota_us").read_text() == str(cpucap.PERIOD_US * 5 // 100)
    cap.add(4242)
    assert (group / "cgroup.procs").read_text() == "4242"
    cap.lift()
    assert (group / "cpu.cfs_quota_us").read_text() == "-1"
    (group / "cpu.stat").write_text("nr_periods 10\nnr_throttled 4\nthrottled_time 2500000000\n")
    assert cap.throttled_seconds() == pytest.approx(2.5)


def test_v2_enables_the_controller_and_writes_cpu_max(tmp_path):
    root = v2_tree(tmp_path / "unified", enabled=False)
    cap = cpucap.CpuCap("node-1", 150, root=root)
    assert "+cpu" in (root / "cgroup.subtree_control").read_text()
    assert (root / "node-1" / "cpu.max").read_text() == f"{cpucap.PERIOD_US * 3 // 2} " \
        f"{cpucap.PERIOD_US}"
    cap.lift()
    assert (root / "node-1" / "cpu.max").read_text() == f"max {cpucap.PERIOD_US}"
    (root / "node-1" / "cpu.stat").write_text("usage_usec 10\nthrottled_usec 750000\n")
    assert cap.throttled_seconds() == pytest.approx(0.75)


def test_a_tiny_share_still_gets_the_kernels_least_quota(tmp_path):
    v1_tree(tmp_path)
    cpucap.CpuCap("tiny", 0.1, root=tmp_path)
    assert (tmp_path / "cpu" / "tiny" / "cpu.cfs_quota_us").read_text() == "1000"


def test_remove_moves_the_processes_out_and_deletes_the_group(tmp_path, monkeypatch):
    cpu = v1_tree(tmp_path)
    cap = cpucap.CpuCap("gone", 10, root=tmp_path)
    (cap.path / "cgroup.procs").write_text("11\n12\n")
    moved: list[str] = []
    real_write = Path.write_text

    def write(self: Path, text: str, *args: object, **kwargs: object) -> int:
        if self == cpu / "cgroup.procs":
            moved.append(text)
            return len(text)
        return real_write(self, text)
    monkeypatch.setattr(Path, "write_text", write)
    removed: list[Path] = []
    monkeypatch.setattr(cpucap.os, "rmdir", lambda path: removed.append(Path(path)))
    cap.remove()
    assert moved == ["11", "12"]
    assert removed == [cap.path]


def test_no_controller_and_no_share_are_refused(tmp_path):
    with pytest.raises(RuntimeError, match="no CPU controller"):
        cpucap.CpuCap("x", 5, root=tmp_path)
    v1_tree(tmp_path)
    for bad in (0, -5):
        with pytest.raises(ValueError):
            cpucap.CpuCap("x", bad, root=tmp_path)


def test_the_summary_gives_each_size_its_ratio_to_the_fewest_nodes(capsys):
    def run(mode: str, nodes: int, taken: list[float]) -> dict:
        return {"mode": mode, "nodes": nodes, "steps": [{"taken_rate": t} for t in taken]}
    routing.summary([run("fanout", 1, [900, 1000]), run("interest", 1, [950, 1000]),
                     run("fanout", 4, [1000, 950]), run("interest", 4, [2000, 3900])])
    lines = [line.split() for line in capsys.readouterr().out.strip().splitlines()[1:]]
    assert lines == [["fanout", "1", "node(s):", "1000", "x1.00"],
                     ["interest", "1", "node(s):", "1000", "x1.00"],
                     ["fanout", "4", "node(s):", "1000", "x1.00"],
                     ["interest", "4", "node(s):", "3900", "x3.90"]]


def test_a_tiny_cluster_run_loses_nothing_and_cleans_up(tmp_path):
    """bench/routing.py end to end, two nodes in each mode on RabbitMQ: every
    event once, and its exchanges and queues gone afterwards."""
    import subprocess

    from tests.services import require_service
    require_service("RabbitMQ", "127.0.0.1", 5672)
    pika = pytest.importorskip("pika")
    out = tmp_path / "routing.json"
    subprocess.run([sys.executable, os.path.join(ROOT, "bench", "routing.py"), "--nodes", "2",
                    "--users", "20", "--rates", "40", "--seconds", "1", "--json", str(out)],
                   check=True, timeout=240, capture_output=True)
    import json
    results = json.loads(out.read_text())
    assert [(r["mode"], r["nodes"]) for r in results] == [("fanout", 2), ("interest", 2)]
    for r in results:
        assert r["events_expected"] == 40
        assert (r["lost"], r["duplicated"], r["foreign"]) == (0, 0, 0)
        step = r["steps"][0]
        # fanout: each node applies every change; interest: its users' only
        assert sum(step["applied"]) == (80 if r["mode"] == "fanout" else 40)
    conn = pika.BlockingConnection(pika.URLParameters("amqp://guest:guest@127.0.0.1:5672/%2F"))
    try:
        for r in results:
            for kind, name in [("exchange", r["exchange"])] + [("queue", q) for q in r["queues"]]:
                channel = conn.channel()
                with pytest.raises(pika.exceptions.ChannelClosedByBroker):
                    if kind == "exchange":
                        channel.exchange_declare(name, passive=True)
                    else:
                        channel.queue_declare(name, passive=True)
    finally:
        conn.close()
