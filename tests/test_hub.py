"""The hub (streamlab/hub/): one step loop, run by the server's step thread and by the simulation."""

from __future__ import annotations

import pytest

import asyncio

from harness.run import once
from harness.format.load import load_by_name
from harness.sim.server import SimStepClock
from harness.record.trace import metric_values, percentile
from streamlab.config import ServiceConfig
from streamlab.hub import Hub
from streamlab.hub.step_clock import WallStepClock
from tests.asgi import running_service

# Times nothing (read for it): may run beside another such item under xdist (harness/cores_lock.py).
pytestmark = pytest.mark.shares_cores


def test_the_step_thread_and_the_simulation_run_the_same_step_loop(monkeypatch, tiny):
    clocks = []
    original = Hub.step_loop

    def spy(self, clock):
        clocks.append(type(clock))
        return original(self, clock)

    monkeypatch.setattr(Hub, "step_loop", spy)
    trace, _ = once.simulate(load_by_name("overlap_4"))
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
    early, _ = once.simulate(scenario)
    step = scenario.model_copy(update={"server": scenario.server.model_copy(update={"first_token": "step"})})
    late, _ = once.simulate(step)
    assert percentile(metric_values(early.group("joiners"), "ttft_s"), 50) < \
        percentile(metric_values(late.group("joiners"), "ttft_s"), 50)
