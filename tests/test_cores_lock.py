"""harness/cores_lock.py's phases: `scripts/dev test` runs the shared items on two workers, then the
timed ones alone; between them every item runs once."""

from __future__ import annotations

import subprocess
import sys

import pytest

# Times nothing (read for it): may run beside another such item under xdist (harness/cores_lock.py).
pytestmark = pytest.mark.shares_cores

ITEMS = """
import pytest

@pytest.mark.shares_cores
def test_shared_one(): pass

@pytest.mark.shares_cores
def test_shared_two(): pass

def test_timed(): pass
"""


def _passed(tmp_path, *args: str) -> list[str]:
    (tmp_path / "test_items.py").write_text(ITEMS)
    run = subprocess.run([sys.executable, "-m", "pytest", "-p", "harness.cores_lock", "-p", "no:cacheprovider",
                          "-q", "-rA", "-o", "addopts=", "test_items.py", *args],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120)
    return sorted(line.split("::")[1] for line in run.stdout.splitlines() if line.startswith("PASSED"))


def test_each_phase_runs_its_side_and_the_two_run_every_item_once(tmp_path):
    shared = _passed(tmp_path, "--cores-phase", "shared")
    timed = _passed(tmp_path, "--cores-phase", "timed")
    assert shared == ["test_shared_one", "test_shared_two"] and timed == ["test_timed"]
    assert _passed(tmp_path) == sorted(shared + timed)  # no phase: everything, as before


def test_a_phase_with_nothing_of_its_side_selects_nothing(tmp_path):
    (tmp_path / "test_items.py").write_text(ITEMS)
    run = subprocess.run([sys.executable, "-m", "pytest", "-p", "harness.cores_lock", "-p", "no:cacheprovider",
                          "-q", "-o", "addopts=", "test_items.py", "-k", "timed", "--cores-phase", "shared"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert run.returncode == 5, run.stdout  # pytest's "no tests collected": scripts/dev reads it as empty
