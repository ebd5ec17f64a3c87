"""A process capped at a share of one core, with the kernel's CPU controller.

The cluster benchmark (bench/routing.py ``--node-cpu``) uses it to give each
node the same small CPU budget, as if each ran on a small machine of its
own: on a two-core machine four uncapped nodes, the broker and the publisher
share what there is, and the cluster's ceiling cannot show. With every node
capped, what a node can apply per second is fixed, and the change rate the
cluster takes is what the routing mode makes of it.

cgroup v2 (``cpu.max`` in a group under ``/sys/fs/cgroup``, the ``cpu``
controller enabled for its children) or cgroup v1 (``cpu.cfs_quota_us`` under
``/sys/fs/cgroup/cpu``); either needs root. ``CpuCap.lift`` takes the cap off
(the processes stay in the group), ``CpuCap.remove`` moves them back to the
root group and deletes the group.
"""
from __future__ import annotations

import os
from pathlib import Path

PERIOD_US = 20_000      # a short period: a capped node waits at most ~20 ms


def _v2_root(root: Path) -> Path | None:
    controllers = root / "cgroup.controllers"
    if controllers.exists() and "cpu" in controllers.read_text().split():
        return root
    return None


def _v1_root(root: Path) -> Path | None:
    cpu = root / "cpu"
    if (cpu / "cpu.cfs_quota_us").exists():
        return cpu
    return None


class CpuCap:
    """A control group whose processes together get at most ``percent`` % of
    one core (``percent`` > 0; above 100 is more than one core)."""

    def __init__(self, name: str, percent: float, root: Path = Path("/sys/fs/cgroup")) -> None:
        if not percent > 0:
            raise ValueError("percent must be more than 0")
        self.percent = percent
        v2 = _v2_root(root)
        v1 = None if v2 is not None else _v1_root(root)
        if v2 is None and v1 is None:
            raise RuntimeError(f"no CPU controller under {root}: a CPU cap needs cgroup v1's "
                               "cpu hierarchy or cgroup v2 with the cpu controller")
        self.v2 = v2 is not None
        self.parent: Path = v2 if v2 is not None else v1     # type: ignore[assignment]
        if self.v2:
            subtree = self.parent / "cgroup.subtree_control"
            if "cpu" not in subtree.read_text().split():
                subtree.write_text("+cpu")
        self.path = self.parent / name
        self.path.mkdir(exist_ok=True)
        self._set(percent)

    def quota_us(self, percent: float) -> int:
        return max(1000, int(PERIOD_US * percent / 100))

    def _set(self, percent: float | None) -> None:
        if self.v2:
            quota = "max" if percent is None else str(self.quota_us(percent))
            (self.path / "cpu.max").write_text(f"{quota} {PERIOD_US}")
        else:
            (self.path / "cpu.cfs_period_us").write_text(str(PERIOD_US))
            quota = -1 if percent is None else self.quota_us(percent)
            (self.path / "cpu.cfs_quota_us").write_text(str(quota))

    def add(self, pid: int) -> None:
        """Move ``pid`` (the whole process) into the group."""
        (self.path / "cgroup.procs").write_text(str(pid))

    def lift(self) -> None:
        """No cap any more (the group stays)."""
        self._set(None)

    def throttled_seconds(self) -> float:
        """How long the group's processes waited for the cap, in all."""
        stat = dict(line.split() for line in (self.path / "cpu.stat").read_text().splitlines()
                    if len(line.split()) == 2)
        if "throttled_usec" in stat:
            return int(stat["throttled_usec"]) / 1e6
        return int(stat.get("throttled_time", 0)) / 1e9

    def remove(self) -> None:
        """Move what is left to the parent group and delete the group."""
        try:
            pids = (self.path / "cgroup.procs").read_text().split()
        except OSError:
            return
        for pid in pids:
            try:
                (self.parent / "cgroup.procs").write_text(pid)
            except OSError:
                pass        # it ended meanwhile
        try:
            os.rmdir(self.path)
        except OSError:
            pass
