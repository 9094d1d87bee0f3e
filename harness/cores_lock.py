"""pytest plugin: under xdist (`-n 2`), items that time nothing share the cores; an item that
measures time has the machine to itself.

Every item takes a machine-wide lock (an flock on results/.cores.lock) for its whole run, its
fixtures' set-up and tear-down included: shared for an item marked `shares_cores`, exclusive for
every other. So a timing check (a live run's latency, parity, release delay, a drift reading, a
peer's capacity) never runs beside another item, while timing-free work (simulated scenarios,
whose clock is virtual; unit tests; the swarm, in simulation) runs two at a time. Unmarked is
exclusive: an item is shared only when someone has read it and found no clock in its verdicts.
Without xdist the lock is never contended and changes nothing.

`--cores-phase shared|timed` runs one side only: `scripts/dev test` runs the shared items on two
workers, then the timed ones in one process, so no worker idles on the lock (see PHASES).

A module fixture that keeps a server between its items (a peer) holds the machine for the
module with `hold_machine()`: an idle server of its must not sit beside another worker's timed
run. The lock is re-entrant within a process (flock is per open file: a second lock from the
same process on a second open would wait for itself).
"""

from __future__ import annotations

import fcntl
import threading
from contextlib import contextmanager
from pathlib import Path

import pytest

from harness.progress import last_durations

LOCK = Path("results") / ".cores.lock"
MARK = "shares_cores"
# `scripts/dev test` runs the suite in two sessions, one per phase: the shared items on two workers,
# then the timed ones alone. In one session of two workers a worker whose next item is timed waits,
# idle, for the other's shared item to end (the CI swarm: 110 s on one core), and shared items pair
# up only when loadfile happens to hand both workers one at once.
PHASES = ("shared", "timed")


class _Machine:
    """This process's hold on the machine: the open lock file, its mode, and how deep."""

    def __init__(self) -> None:
        self.handle = None
        self.exclusive = False
        self.depth = 0
        self.guard = threading.Lock()

    @contextmanager
    def hold(self, exclusive: bool):
        """Held until the last of this process's nested holds ends, whichever ends last (a module
        fixture's hold begins inside one item and ends inside another)."""
        with self.guard:
            if self.depth and exclusive and not self.exclusive:
                raise RuntimeError("an exclusive hold inside a shared one: leave the item unmarked instead")
            if not self.depth:
                LOCK.parent.mkdir(parents=True, exist_ok=True)
                self.handle = open(LOCK, "a")
                fcntl.flock(self.handle, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
                self.exclusive = exclusive
            self.depth += 1
        try:
            yield
        finally:
            with self.guard:
                self.depth -= 1
                if self.depth == 0:
                    fcntl.flock(self.handle, fcntl.LOCK_UN)
                    self.handle.close()
                    self.handle = None


MACHINE = _Machine()


def hold_machine():
    """The machine to this process alone (a module fixture that keeps a server, a timed run)."""
    return MACHINE.hold(exclusive=True)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--cores-phase", choices=PHASES, default=None,
                     help="run only the items marked shares_cores (shared: two xdist workers keep both cores "
                          "busy) or only the others (timed: one at a time, no worker waiting on the lock)")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", f"{MARK}(expected_s=0): times nothing; may run beside another such item "
                                       "under xdist (expected_s: about how long it runs, for its order where no "
                                       "last run says)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    phase = config.getoption("--cores-phase", None)
    if phase is None:
        return
    keep, dropped = [], []
    for item in items:
        (keep if (item.get_closest_marker(MARK) is not None) == (phase == "shared") else dropped).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
    if phase == "shared":
        # Longest first (the last run's durations; both workers read the same, so collect alike):
        # a long item last is a tail one worker runs alone (the CI swarm, 110 s, came last here and
        # the shared phase took 6.2 min for 8.0 of work over two workers). On a machine that never
        # ran the suite, the marker's expected_s says which are long; the rest keep their place.
        last = last_durations(config)
        keep.sort(key=lambda i: -last.get(i.nodeid, i.get_closest_marker(MARK).kwargs.get("expected_s", 0.0)))
    items[:] = keep


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem):
    with MACHINE.hold(exclusive=item.get_closest_marker(MARK) is None):
        yield
