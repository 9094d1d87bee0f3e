"""One step loop, one option mapping, one runner: the simulation runs the service's own code."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import subprocess
import sys
import textwrap

from harness import runner
from harness.live import ServerProcess, free_port
from harness.scenario import ServerSpec, load_by_name
from harness.simulation import SimStepClock
from streamlab.engine.engine import BatchEngine
from streamlab.hub import Hub
from streamlab.step_clock import WallStepClock
from streamlab.options import SERVE_OPTIONS, service_config
from streamlab.policies import Policy
from streamlab.config import ServiceConfig
from tests.asgi import running_service
from tests.helpers import client_trace

NON_DEFAULT = {"model": "tiny", "policy": Policy.DROP, "queue_limit": 5, "stall_timeout_s": 0.4, "max_batch": 7,
               "max_prefills_per_step": 3, "step_token_budget": 48, "prefill_chunk_tokens": 16, "decode_attention": "gather", "dtype": "bfloat16", "history": 123, "fault_step": 7, "fault_rate": 0.25, "fault_seed": 3,
               "header_timeout_s": 3.5, "body_timeout_s": 4.5, "max_connections": 3000, "max_head_bytes": 20000, "max_headers": 50, "api_key": "k", "debug": True, "admin_port": free_port(), "first_token": "step", "cache_blocks": 333, "block_size": 8,
               "waiting_limit": 11, "admission": "deadline", "ttft_deadline_ms": 250.0, "max_tokens_budget": 555, "keepalive_s": 2.5, "graceful_timeout_s": 1.5,
               "resume_window_s": 4.5, "resume_buffer_events": 77, "resume_buffer_bytes": 9999, "lab": True, "lab_step_slowdown": 1.5}


HARNESS_SIDE = {"proxy"}  # what the harness puts in front of the server, not a server option


def ctx() -> runner.RunContext:
    return runner.RunContext(results_dir=None)


# ---- one step loop ----

def test_the_step_thread_and_the_simulation_run_the_same_step_loop(monkeypatch, tiny):
    clocks = []
    original = Hub.step_loop

    def spy(self, clock):
        clocks.append(type(clock))
        return original(self, clock)

    monkeypatch.setattr(Hub, "step_loop", spy)
    trace, _ = runner.simulate(load_by_name("overlap_4"))
    async def threaded() -> int:
        async with running_service(ServiceConfig(), tiny) as svc:
            reply = await svc.call("/v1/stream", {"prompt": "Return the value", "max_new_tokens": 4,
                                                  "ignore_eos": True})
            return len(reply.tokens)

    assert asyncio.run(threaded()) == 4
    assert clocks == [SimStepClock, WallStepClock]
    assert trace.steps and sum(s["decoded"] for s in trace.steps) > 0  # the step log is kept in simulation too


def test_the_simulation_hands_first_tokens_over_per_prefill_like_the_server():
    """--first-token prefill: a joiner's first token comes before the end of the step it was prefilled in
    (whole-prompt prefill: with a step token budget the prefill is part of the step's one pass)."""
    scenario = load_by_name("late_joiners_8")
    scenario = scenario.model_copy(update={"server": scenario.server.model_copy(update={"step_token_budget": 0})})
    early, _ = runner.simulate(scenario)
    step = scenario.model_copy(update={"server": scenario.server.model_copy(update={"first_token": "step"})})
    late, _ = runner.simulate(step)
    from harness.trace import metric_values, percentile
    assert percentile(metric_values(early.group("joiners"), "ttft_s"), 50) < \
        percentile(metric_values(late.group("joiners"), "ttft_s"), 50)


# ---- a failure is on the trace and fails the run ----

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


# ---- every server option reaches both modes ----

def test_every_serve_option_is_a_scenario_field_with_the_same_default():
    assert set(ServerSpec.model_fields) - HARNESS_SIDE == {o.name for o in SERVE_OPTIONS}
    spec = ServerSpec()
    for o in SERVE_OPTIONS:
        value = getattr(spec, o.name)
        assert (value.value if isinstance(value, Policy) else value) == o.default, o.name


def test_each_option_changes_the_configuration():
    """No field is dropped on the way: changing it alone changes the config."""
    assert set(NON_DEFAULT) == set(ServerSpec.model_fields) - HARNESS_SIDE
    for name, value in NON_DEFAULT.items():
        if name == "model":
            continue  # one model ships small enough for tests
        lab = {"lab": True} if name.startswith(("fault_", "lab_")) else {}  # faults are lab-only
        assert ServerSpec(**{name: value, **lab}).service_config() != ServerSpec(**lab).service_config(), name


def test_the_live_servers_parsed_configuration_equals_the_simulated_one():
    spec = ServerSpec(**NON_DEFAULT)

    async def live_config() -> dict:
        async with ServerProcess(spec.serve_args() + ["--log-level", "warning"]) as server:
            return await server.get_json("/debug/config")

    simulated = json.loads(json.dumps(dataclasses.asdict(spec.service_config()), default=str))
    simulated["api_key"] = "(set)"  # /debug/config never shows the key itself
    assert asyncio.run(live_config()) == simulated
    assert service_config({}) == ServerSpec().service_config()  # one set of defaults


# ---- one runner: verdicts depend on nothing but the items run ----

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


# ---- the service does not need the harness ----

def test_serve_runs_without_the_harness_or_pytest():
    code = textwrap.dedent("""
        import sys
        sys.modules["pytest"] = None; sys.modules["harness"] = None  # importing either now fails
        import streamlab.server, streamlab.app
        from streamlab.cli import main
        try:
            main(["serve", "--help"])
        except SystemExit as exc:
            assert exc.code == 0
        assert "harness.cli" not in sys.modules
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "--max-prefills-per-step" in proc.stdout and "--first-token" in proc.stdout


def test_the_arrivals_check_fails_a_joiner_sent_after_its_group_ended():
    """late_joiners_8's joiners must come while the running streams run: one sent after they all
    ended would pass its latency bound for nothing."""
    from harness.checks import arrivals
    from harness.trace import StreamRecord

    def record(group: str, i: int, sent: float, end: float) -> StreamRecord:
        return StreamRecord(group, i, "reader", "p", {}, sent_at=sent, token_times=[sent + 0.01, end],
                            ended_at=end, finish="length")
    scenario = load_by_name("late_joiners_8")
    running = [record("running", i, 0.0, 0.52) for i in range(8)]
    ok = client_trace("late_joiners_8", "sim", running + [record("joiners", 0, 0.3, 0.32)])
    assert arrivals(scenario, ok).passed
    late = client_trace("late_joiners_8", "sim", running + [record("joiners", 0, 0.6, 0.62)])
    check = arrivals(scenario, late)
    assert not check.passed and check.details == ["joiners: 1 sent after running ended"]
