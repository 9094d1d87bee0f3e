"""The runner (harness/run/runner.py): a failure is on the trace and fails the run, and verdicts depend
on nothing but the items run."""

from __future__ import annotations

import sys
import textwrap

from harness.run import runner
from harness.format.load import load_by_name
from streamlab.engine.engine import BatchEngine


def ctx() -> runner.RunContext:
    return runner.RunContext(results_dir=None)


def _broken_step(original):
    def step(self, on_prefill=None):
        if self.steps_started >= 5 and self.config.max_batch == 32:  # the scenario's, not a solo reference's
            raise RuntimeError("injected engine fault")
        return original(self, on_prefill)
    return step


def test_an_engine_failure_in_simulation_is_on_the_trace_and_fails_the_run(monkeypatch):
    monkeypatch.setattr(BatchEngine, "step", _broken_step(BatchEngine.step))
    outcome = runner.run_scenario(load_by_name("overlap_4"), "sim", ctx())
    healthy = next(c for c in outcome.checks if c.name == "healthy")
    assert not healthy.passed and not outcome.ok
    assert "Traceback" in outcome.trace.failure and "injected engine fault" in outcome.trace.failure


def test_an_engine_failure_live_is_on_the_trace_and_fails_the_run(tmp_path, monkeypatch):
    # The real `streamlab serve` process, with a fault injected at start-up by sitecustomize.
    (tmp_path / "sitecustomize.py").write_text(textwrap.dedent("""
        from streamlab.engine.engine import BatchEngine
        _original = BatchEngine.step
        def step(self, on_prefill=None):
            if self.steps_started >= 5 and self.config.max_batch == 32:  # not the warm-up engine
                raise RuntimeError("injected engine fault")
            return _original(self, on_prefill)
        BatchEngine.step = step
    """))
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path}:{sys.path[0]}")
    outcome = runner.run_scenario(load_by_name("overlap_4"), "live", ctx())
    healthy = next(c for c in outcome.checks if c.name == "healthy")
    assert not healthy.passed and "injected engine fault" in (outcome.trace.failure or "")


# ---- verdicts depend on nothing but the items run ----

def _verdicts(outcomes) -> dict:
    return {o.scenario.name: [(c.name, c.ok, c.figure) for c in o.checks if c.name != "profile_drift"]
            for o in outcomes}


def test_any_subset_in_any_order_gives_the_same_verdicts():
    names = ["overlap_4", "overlap_1", "late_joiners_8"]
    one, two = ctx(), ctx()
    forward = [runner.run_scenario(load_by_name(n), "sim", one) for n in names]
    backward = [runner.run_scenario(load_by_name(n), "sim", two) for n in reversed(names)]
    alone = [runner.run_scenario(load_by_name("overlap_4"), "sim", ctx())]
    assert _verdicts(forward) == _verdicts(backward)
    assert _verdicts(alone)["overlap_4"] == _verdicts(forward)["overlap_4"]
