"""harness/cores_lock.py's phases: `scripts/dev test` runs the shared items on two workers, then the
timed ones alone; between them every item runs once."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

# Times nothing (read for it): may run beside another such item under xdist (harness/cores_lock.py).
pytestmark = pytest.mark.shares_cores

ITEMS = """
import pytest

@pytest.mark.shares_cores
def test_shared_one(): pass

@pytest.mark.shares_cores(expected_s=30)
def test_shared_two(): pass

def test_timed(): pass
"""


def _pytest(tmp_path, *args: str) -> subprocess.CompletedProcess:
    (tmp_path / "test_items.py").write_text(ITEMS)
    env = {**os.environ, "STREAMLAB_CACHE": str(tmp_path / "machine")}  # not this machine's copy of durations
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "harness.cores_lock", "-q", "-rA", "-o", "addopts=",
                           "test_items.py", *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


def _passed(tmp_path, *args: str) -> list[str]:
    run = _pytest(tmp_path, "-p", "no:cacheprovider", *args)
    return sorted(line.split("::")[1] for line in run.stdout.splitlines() if line.startswith("PASSED"))


def test_each_phase_runs_its_side_and_the_two_run_every_item_once(tmp_path):
    shared = _passed(tmp_path, "--cores-phase", "shared")
    timed = _passed(tmp_path, "--cores-phase", "timed")
    assert shared == ["test_shared_one", "test_shared_two"] and timed == ["test_timed"]
    assert _passed(tmp_path) == sorted(shared + timed)  # no phase: everything, as before


def test_a_phase_with_nothing_of_its_side_selects_nothing(tmp_path):
    run = _pytest(tmp_path, "-p", "no:cacheprovider", "-k", "timed", "--cores-phase", "shared")
    assert run.returncode == 5, run.stdout  # pytest's "no tests collected": scripts/dev reads it as empty


def test_the_shared_phase_starts_the_longest_items_first(tmp_path):
    """By the last run's durations (pytest's cache here), so no long item is a tail one worker
    runs alone; without them, by the marker's expected_s, then collection order."""
    def order(*args: str) -> list[str]:
        run = _pytest(tmp_path, "--collect-only", "--cores-phase", "shared", *args)
        return [line.split("::")[1] for line in run.stdout.splitlines() if "::" in line]

    assert order("-p", "no:cacheprovider") == ["test_shared_two", "test_shared_one"]  # expected_s=30 first
    cached = tmp_path / ".pytest_cache" / "v" / "streamlab"
    cached.mkdir(parents=True)
    (cached / "durations").write_text(json.dumps({"test_items.py::test_shared_one": 110.0,
                                                  "test_items.py::test_shared_two": 0.5}))
    assert order() == ["test_shared_one", "test_shared_two"]  # what the last run measured comes first
