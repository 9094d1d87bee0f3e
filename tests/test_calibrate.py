"""The fit of this machine's cost model (harness/calibrate.py), on traces whose terms are known."""

from __future__ import annotations

import dataclasses

import pytest

from harness.calibrate import calibration_scenarios, fit_per_request, head_span
from harness.profile import load_profile
from harness.runner import run_trace
from harness.simulation import SimBackend


def test_per_request_is_fitted_through_the_simulation_not_as_a_burst_span_over_its_heads():
    """A 'live' burst simulated with a known per-request cost: the fit finds that cost again,
    while the burst's head span over its heads (the old fit) reads more, since the first
    requests' steps run inside the span and the simulation charges those steps itself."""
    profile = load_profile("tiny")
    known = dataclasses.replace(profile, per_request_s=0.0012)
    bursts = {s.name: s for s in calibration_scenarios("tiny") if s.name in ("cal_batch_8", "cal_batch_16")}
    live = {name: [run_trace(s, SimBackend(known))[0]] for name, s in bursts.items()}
    fitted, heads = fit_per_request(dataclasses.replace(profile, per_request_s=0.0), live, bursts)
    assert heads == 8 + 16
    assert fitted == pytest.approx(0.0012, rel=0.1)
    span, n = head_span(live["cal_batch_16"][0])
    assert span / n > 1.05 * fitted  # what the old fit read (1.07x here): the steps counted twice
