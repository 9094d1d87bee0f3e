"""The cached fit of this machine's cost model is kept only while a live probe agrees with it
(harness/fit/machine.py): the probe passes a fit that describes the machine and refuses one that
does not. Live runs, timed: not marked shares_cores."""

from __future__ import annotations

import dataclasses
import json
import time

import pytest

from harness.fit import machine
from harness.run import once
from harness.machine import speed
from harness.live.backend import live_unavailable
from harness.machine.cost_model import load_profile

pytestmark = pytest.mark.skipif(live_unavailable() is not None, reason=str(live_unavailable()))


def _cached(path, profile, scale: dict[str, float], yardstick: speed.Reading) -> None:
    """`profile` as a cached fit of this machine made an hour ago, each fitted live/sim figure
    times its `scale` (the figures the probe does not read are dropped)."""
    fitted = {k: v * scale[k] for k, v in profile.calibration["live_over_sim_p50"].items() if k in scale}
    data = dataclasses.asdict(dataclasses.replace(
        profile, calibration={**profile.calibration, "live_over_sim_p50": fitted},
        reference_s={**profile.reference_s, "step_s": yardstick.step_s}))
    data["fitted_under"] = {**machine.fitted_under(), "at": time.time() - 3600}
    path.write_text(json.dumps(data))


def test_the_probe_keeps_a_fit_that_holds_and_refits_one_that_does_not(tmp_path, monkeypatch):
    committed = load_profile("tiny")
    # The yardstick is not under test here, the probe is: stale() reads the same yardstick the
    # cached fit was written with. Two readings seconds apart differed 0.82x in a CI run (the
    # 0.1 s yardstick beside another worker), which refits in real use but failed this test.
    yardstick = speed.measure(committed.model)
    monkeypatch.setattr(machine.speed, "measure", lambda model, *a, **k: yardstick)
    # Real live runs of the probe's scenarios, once; stale() then judges those same runs. This
    # tests the decision, not how steady the machine is: two probes a minute apart read a median
    # of 1.16x in a CI run (every figure 1.08-1.30x: the machine, not the probe), which refits in
    # real use but failed this test. How far probes spread is docs/HARNESS.md's figure.
    recorded: dict[str, list] = {}
    real_run_live = once.run_live

    def recording(scenario, progress=None):
        run = real_run_live(scenario, progress)
        recorded.setdefault(scenario.name, []).append(run)
        return run

    monkeypatch.setattr(once, "run_live", recording)
    here = machine.probe(committed, say=lambda line: None)  # this machine against the committed fit
    assert set(here) == {f"{s} {m}" for s in machine.PROBE for m in machine.PROBE_METRICS}, here
    replayed: list[str] = []

    def replay(scenario, progress=None):  # each probe reads the recorded runs in their order
        runs = recorded[scenario.name]
        replayed.append(scenario.name)
        return runs[(replayed.count(scenario.name) - 1) % len(runs)]

    monkeypatch.setattr(once, "run_live", replay)
    path = tmp_path / "tiny.json"
    _cached(path, committed, here, yardstick)  # a fit that describes what these runs read
    assert machine.stale("tiny", path, say=lambda line: None) is None
    assert "probed_at" in json.loads(path.read_text())  # a kept fit is marked as checked
    # As if the machine served 1.5x slower when it was fitted than it does now: the probe's
    # median moves 1.5x against a tolerance of 1.15x.
    runs_per_probe = len(replayed)
    _cached(path, committed, {k: v * 1.5 for k, v in here.items()}, yardstick)
    reason = machine.stale("tiny", path, say=lambda line: None)
    assert reason is not None and "probe" in reason and "median 0.67x" in reason, reason
    assert "probed_at" not in json.loads(path.read_text())  # a refused fit is not marked as checked
    assert len(replayed) == 2 * runs_per_probe  # past PROBE_SURE: refused on one probe
    # 1.2x: past the tolerance, within PROBE_SURE: probed again, and refused on both probes' runs.
    _cached(path, committed, {k: v * 1.2 for k, v in here.items()}, yardstick)
    reason = machine.stale("tiny", path, say=lambda line: None)
    assert reason is not None and "median 0.83x" in reason, reason
    assert len(replayed) == 4 * runs_per_probe


def test_a_fit_this_test_run_checked_holds_for_its_other_workers_without_a_probe(tmp_path, monkeypatch):
    committed = load_profile("tiny")
    yardstick = speed.Reading(committed.model, {1: committed.reference_s["step_s"]})  # not moved
    monkeypatch.setattr(machine.speed, "measure", lambda model, *a, **k: yardstick)

    def no_probe(*args, **kwargs):
        raise AssertionError("probed a fit this run already checked")

    path = tmp_path / "tiny.json"
    _cached(path, committed, {}, yardstick)
    monkeypatch.setenv(machine.RUN_ID, "run-a")
    path.write_text(json.dumps({**json.loads(path.read_text()), "checked_by_run": "run-a"}))
    monkeypatch.setattr(machine, "probe", no_probe)
    assert machine.stale("tiny", path, say=lambda line: None) is None
    monkeypatch.setenv(machine.RUN_ID, "run-b")  # another run probes it (an hour old)
    with pytest.raises(AssertionError, match="probed"):
        machine.stale("tiny", path, say=lambda line: None)
