"""The check registry (harness/judge/registry.py): every check declared once, dispatched from it, and one
rule for all of them: a check that compared nothing is not observable, never passed."""

from __future__ import annotations

import typing

import pytest

from harness.judge import checks
from harness.judge import registry
from harness.run import once, runner
from harness.format.scenario import Scenario
from harness.format.load import load_by_name
from harness.format.expect import CheckName
from harness.record.trace import StreamRecord
from harness.record.verdict import CheckResult
from tests.helpers import client_trace

# Times nothing (read for it): may run beside another such item under xdist (harness/cores_lock.py).
pytestmark = pytest.mark.shares_cores


def test_every_declared_check_has_an_implementation_or_is_timed():
    for spec in registry.CHECKS:
        assert spec.timing or spec.name in registry.NATIVE, spec.name
    assert set(registry.OUTSIDE) <= {c.name for c in registry.CHECKS if c.on_target in ("gauges", "health", "counters", "finish_counters")}


def test_any_declared_check_can_be_a_negative_control():
    assert typing.get_args(CheckName) == registry.NAMES
    assert {"regression", "parity", "profile_drift"} <= set(registry.NAMES)
    data = load_by_name("overlap_4").model_dump(mode="json")
    data["expect"]["expect_failure"] = ["parity"]
    assert Scenario.model_validate(data).expect.expect_failure == ["parity"]


def test_nothing_compared_is_not_observable_never_passed():
    refused = StreamRecord("bad", 0, "bad_request", "p", {}, sent_at=0.0, status=422)
    trace = client_trace("x", "sim", [refused])
    identity = checks.identity(None, trace, {})
    assert identity.passed is True and identity.compared == 0  # what the function alone says
    settled = registry.settle(identity, [])
    assert settled.passed is None and settled.line().startswith("identity: not observable")
    assert registry.settle(CheckResult("identity", True, "1/1", "all", compared=1), []).passed is True
    assert registry.settle(CheckResult("identity", False, "0/0", "all", compared=0), []).passed is False  # a failure stays
    trace.server = {"double_release_attempts": 0}
    once = checks.exactly_once(None, trace)  # no request was accepted: nothing released to count
    assert once.compared == 0 and registry.settle(once, []).passed is None


def test_a_scenario_without_a_baseline_reports_its_gate_not_observable():
    sim = once.simulate(load_by_name("overlap_1"))[0]
    gate = registry.settle(runner.timing.regression(sim, {}), [])
    assert gate.passed is None and "no committed sim baseline" in gate.figure


def test_run_scenario_refuses_a_mode_the_file_does_not_list():
    scenario = load_by_name("overload_deadline")  # modes: [live]
    with pytest.raises(ValueError, match="live mode only"):
        runner.run_scenario(scenario, "sim", runner.RunContext(results_dir=None))
