"""The fit of this machine's cost model (harness/fit/calibrate.py), on traces whose terms are known."""

from __future__ import annotations

import dataclasses

import pytest

from harness.fit.calibrate import PADDED, REFUSED, UNREAD, calibration_scenarios, fit_bytes, fit_per_request, head_span
from harness.machine.cost_model import load_profile
from harness.run.once import run_trace
from harness.format.scenario import SCENARIOS_DIR
from harness.format.load import load
from harness.sim.backend import SimBackend

# Times nothing (read for it): may run beside another such item under xdist (harness/cores_lock.py).
pytestmark = pytest.mark.shares_cores


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


def test_a_bytes_cost_is_split_into_the_servers_write_and_the_clients_read():
    """'Live' runs of cal_unread and cal_padded simulated with known write and read costs per byte:
    the fit finds both again, while one term charged at the write (the fit before) reads their
    sum off cal_padded and so charges a slow reader's bytes to the server long before it reads them."""
    profile = load_profile("tiny")
    known = dataclasses.replace(profile, serving_per_byte_s=12e-9, client_per_byte_s=9e-9)
    scenarios = {s.name: s for s in calibration_scenarios("tiny") if s.name in (PADDED, UNREAD)}
    live = {name: [run_trace(s, SimBackend(known))[0]] for name, s in scenarios.items()}
    fitted, streams = fit_bytes(profile, live, scenarios)
    assert streams == 4 + 4
    assert fitted.serving_per_byte_s == pytest.approx(12e-9, rel=0.15)
    assert fitted.client_per_byte_s == pytest.approx(9e-9, rel=0.15)
    one_term, _ = fit_bytes(profile, {PADDED: live[PADDED]}, scenarios)  # no cal_unread: both in one term
    assert one_term.client_per_byte_s == 0.0
    assert one_term.serving_per_byte_s > 1.5 * 12e-9


def test_a_refusal_is_fitted_on_its_own_burst_and_charged_only_to_bad_requests():
    """A 'live' burst of refusals simulated with a known refusal cost: the fit finds it again,
    starting from an admitted request's cost; and in bad_requests a cheaper refusal lets the good
    requests behind the refusals start sooner, while a run with no bad request is unchanged."""
    profile = dataclasses.replace(load_profile("tiny"), per_request_s=0.0016)
    known = dataclasses.replace(profile, refused_request_s=0.0005)
    burst = {s.name: s for s in calibration_scenarios("tiny") if s.name == REFUSED}
    live = {REFUSED: [run_trace(burst[REFUSED], SimBackend(known))[0]]}
    fitted, heads = fit_per_request(dataclasses.replace(profile, refused_request_s=profile.per_request_s), live,
                                    burst, term="refused_request_s")
    assert heads == 24
    assert fitted == pytest.approx(0.0005, rel=0.1)
    bad = load(SCENARIOS_DIR / "bad_requests.yaml")
    whole = run_trace(bad, SimBackend(dataclasses.replace(profile, refused_request_s=None)))[0]
    cheap = run_trace(bad, SimBackend(known))[0]
    assert max(s.head_at - s.sent_at for s in cheap.streams if s.group != "good") < \
        max(s.head_at - s.sent_at for s in whole.streams if s.group != "good")
    plain = load(SCENARIOS_DIR / "overlap_4.yaml")
    assert [s.token_times for s in run_trace(plain, SimBackend(known))[0].streams] == \
        [s.token_times for s in run_trace(plain, SimBackend(profile))[0].streams]
