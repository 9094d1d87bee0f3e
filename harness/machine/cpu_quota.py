"""This process's CPU quota, read from its cgroup (v1 or v2): the fraction of the cores it may use
and the longest pause the quota can make. A leaf module: the machine's fit and the timing checks
both read it, and the fit reads the timing checks.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path


def _cfs() -> tuple[int, int] | None:
    """This process's CPU quota and its period in microseconds (cgroup v1 or v2), or None."""
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            if "cpu" in controllers.split(",") or controllers == "":
                base = Path("/sys/fs/cgroup/cpu" if controllers else "/sys/fs/cgroup") / path.lstrip("/")
                if (base / "cpu.cfs_quota_us").exists():
                    quota = int((base / "cpu.cfs_quota_us").read_text())
                    return None if quota < 0 else (quota, int((base / "cpu.cfs_period_us").read_text()))
                if (base / "cpu.max").exists():
                    quota_s, period_s = (base / "cpu.max").read_text().split()
                    return None if quota_s == "max" else (int(quota_s), int(period_s))
    except (OSError, ValueError):
        return None
    return None


def cpu_quota() -> float | None:
    """This process's CPU quota as a fraction of the machine's cores, or None."""
    cfs = _cfs()
    return None if cfs is None else round(cfs[0] / cfs[1] / len(os.sched_getaffinity(0)), 3)


@functools.lru_cache(maxsize=1)
def quota_pause_s() -> float | None:
    """The longest a CPU quota can hold a ready thread: the group spends its quota with every core
    busy and waits out the rest of the period (7.5 ms of 10 at a 0.25 quota of 2 cores). None
    without a quota. Servers the harness runs share its group (loopback, `scripts/dev slow`)."""
    cfs = _cfs()
    return None if cfs is None else max(0.0, cfs[1] - cfs[0] / len(os.sched_getaffinity(0))) / 1e6
