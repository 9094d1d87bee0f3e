"""A slower machine on demand (`scripts/dev slow F CMD`): a few scenarios pass under a CPU quota of
half this machine with the committed profile and baselines unchanged, every timing verdict judged
on this machine's own figures (harness/timing.py)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = "overlap_4,late_joiners_8,disconnect_fin_mid,bad_requests,slow_reader_pause_1"


def quota_unavailable() -> str | None:
    if os.geteuid() != 0:
        return "a CPU quota needs root (a cgroup of our own)"
    if not (Path("/sys/fs/cgroup/cpu/cpu.cfs_quota_us").exists() or Path("/sys/fs/cgroup/cgroup.controllers").exists()):
        return "no cgroup cpu controller on this machine"
    return None


@pytest.mark.slow
def test_scenarios_pass_on_a_machine_half_as_fast():
    reason = quota_unavailable()
    if reason:
        pytest.skip(reason)
    proc = subprocess.run([str(ROOT / "scripts" / "dev"), "slow", "0.5", "main", "-k", SCENARIOS], cwd=ROOT,
                          capture_output=True, text=True, timeout=1200)
    assert "under a CPU quota of 0.5" in proc.stderr
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]


def test_slow_refuses_a_fraction_out_of_range():
    proc = subprocess.run([str(ROOT / "scripts" / "dev"), "slow", "1.5", "main"], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 2 and "FRACTION" in proc.stderr
