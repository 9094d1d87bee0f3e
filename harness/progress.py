"""pytest plugin: a long item says it is still running, and the suite says how far it is.

An item still running after FIRST_S prints a line (its name, how long it has run, the run's
place: items done of all, minutes spent, and minutes left where the last run's durations are
known), then one every EVERY_S. Durations are kept in pytest's cache (.pytest_cache) and copied to
the machine's cache (streamlab.cache), which a fresh clone reads; on a machine that never ran the
suite the estimate is the mean item so far. It watches pytest's log hooks, which
xdist's workers forward, so it works with and without `-n`. Quiet items print nothing extra.
"""

from __future__ import annotations

import json
import threading
import time
from contextlib import nullcontext

import pytest

from streamlab.cache import cache_dir, write_json

FIRST_S = 10.0  # a wait past this says what it is doing
EVERY_S = 30.0  # then this often: a CI log stays readable
CACHE_KEY = "streamlab/durations"
# A copy outside the checkout (streamlab.cache), so a fresh clone on a machine that ran the suite
# before knows its items' durations too: the time left, and the order of the shared phase.
MACHINE_COPY = "pytest-durations.json"


def last_durations(config: pytest.Config) -> dict[str, float]:
    """Each item's seconds in the last run that ran it: this checkout's pytest cache, else the
    machine's copy; {} on a machine that never ran the suite."""
    cache = getattr(config, "cache", None)
    found = (cache.get(CACHE_KEY, {}) if cache is not None else {}) or {}
    if not found:
        try:
            found = json.loads((cache_dir("pytest") / MACHINE_COPY).read_text())
        except (OSError, ValueError):
            found = {}
    return found if isinstance(found, dict) else {}


class Progress:
    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.cache = getattr(config, "cache", None)
        self.last: dict[str, float] = last_durations(config)
        self.durations: dict[str, float] = {}
        self.running: dict[str, threading.Event] = {}
        self.done: set[str] = set()
        self.ids: set[str] | None = None  # this session's items (a phase of the suite is not all of it)
        self.started = time.monotonic()

    @property
    def total(self) -> int:
        return len(self.ids or ())

    def where(self) -> str:
        """Items done of all, minutes spent, and minutes left (the last run's durations of the
        items not done, the mean so far for an item new since)."""
        spent = (time.monotonic() - self.started) / 60
        todo = self.total - len(self.done)
        ids = self.last if self.ids is None else [i for i in self.ids if i in self.last]
        known = [self.last[i] for i in ids if i not in self.done and i not in self.running]
        mean = sum(self.durations[i] for i in self.done) / len(self.done) if self.done else None
        if known and len(known) >= todo:
            left = sum(sorted(known)[-todo:]) if todo else 0.0  # at most the slowest `todo` left
        elif mean is not None:
            left = sum(known) + mean * (todo - len(known))
        else:
            left = None
        tail = f", about {left / 60:.0f} min left" if left is not None else ""
        return f"{len(self.done)}/{self.total} items, {spent:.1f} min{tail}"

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, items) -> None:
        self.ids = {i.nodeid for i in items}

    @pytest.hookimpl(optionalhook=True)  # xdist's hook: a project without xdist runs the plugin too
    def pytest_xdist_node_collection_finished(self, node, ids) -> None:
        self.ids = set(ids)

    def pytest_runtest_logstart(self, nodeid: str, location) -> None:
        done = self.running[nodeid] = threading.Event()
        began = time.monotonic()

        reporter = self.config.pluginmanager.get_plugin("terminalreporter")  # registered after us

        def watch() -> None:
            wait = FIRST_S
            while not done.wait(wait):
                last = self.last.get(nodeid)
                usual = f" (took {last:.0f} s last run)" if last else ""
                capture = self.config.pluginmanager.get_plugin("capturemanager")
                # Past the item's captured output, as pytest's live logs are.
                with capture.global_and_fixture_disabled() if capture is not None else nullcontext():
                    reporter.write_line(f"  ... still running {nodeid}: {time.monotonic() - began:.0f} s{usual}; "
                                        f"suite {self.where()}")
                wait = EVERY_S

        if reporter is not None:
            threading.Thread(target=watch, name="pytest-progress", daemon=True).start()

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.durations[report.nodeid] = self.durations.get(report.nodeid, 0.0) + report.duration

    def pytest_runtest_logfinish(self, nodeid: str, location) -> None:
        self.done.add(nodeid)
        done = self.running.pop(nodeid, None)
        if done is not None:
            done.set()

    def pytest_sessionfinish(self) -> None:
        for done in self.running.values():
            done.set()
        if not self.durations:
            return
        merged = {**self.last, **{k: round(v, 2) for k, v in self.durations.items()}}
        if self.cache is not None:
            self.cache.set(CACHE_KEY, merged)
        try:
            write_json(cache_dir("pytest") / MACHINE_COPY, merged)
        except OSError:
            pass  # a read-only home: the estimate is the mean item so far, as on a new machine


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):  # xdist's workers report through the controller
        config.pluginmanager.register(Progress(config), "streamlab-progress")
