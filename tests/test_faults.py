"""Crash-only engine faults: a step that raises ends only its own sequences, releases their
blocks once, and the engine goes on; steps that keep failing mark it broken, and the server
then refuses work with 503 and says so on /healthz."""

import asyncio
import random

import pytest

from streamlab.config import CacheConfig, EngineConfig, ServiceConfig
from streamlab.engine.engine import BatchEngine
from streamlab.engine.faults import FaultPlan
from streamlab.errors import EngineBroken
from streamlab.engine.sequence import FinishReason
from streamlab.sampling import SamplingParams
from tests.asgi import assert_clean as assert_service_clean, running_service
from tests.helpers import assert_clean, drain, run_steps

# Times nothing (read for it): may run beside another such item under xdist (harness/cores_lock.py).
pytestmark = pytest.mark.shares_cores

PROMPT = "Return the number of items in the container."


def ids(n: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(1, 8192) for _ in range(n)]


def test_a_failed_step_ends_its_sequences_once_and_the_rest_go_on(tiny):
    engine = BatchEngine(tiny.model, EngineConfig(max_batch=2, cache=CacheConfig(64, 16)), FaultPlan(at_step=3))
    for i in range(4):  # two run, two wait for a slot: the waiting ones are not in step 3
        engine.submit(str(i), ids(6, i), SamplingParams(max_new_tokens=6, ignore_eos=True))
    out = run_steps(engine, 2)
    failed = engine.step()
    assert failed.error and "step 3" in failed.error and failed.tokens == []
    assert sorted(f.request_id for f in failed.finished) == ["0", "1"]
    assert all(f.reason is FinishReason.ERROR for f in failed.finished)
    assert engine.stats().releases == 2  # back once, in the failed step
    rest = drain(engine, out)
    assert len(rest.tokens["2"]) == 6 and len(rest.tokens["3"]) == 6  # admitted after: served in full
    assert engine.step_errors == 1 and engine.check_released() == []
    assert_clean(engine)


def test_steps_that_keep_failing_break_the_engine(tiny):
    engine = BatchEngine(tiny.model, EngineConfig(max_batch=4, cache=CacheConfig(64, 16)), FaultPlan(rate=1.0))
    for i in range(3):
        engine.submit(str(i), ids(6, i), SamplingParams(max_new_tokens=40, ignore_eos=True))
        if i < 2:
            assert engine.step().error  # contained: the engine goes on
    with pytest.raises(EngineBroken, match="3 steps failed in a row"):
        engine.step()
    assert engine.check_released() == [] and engine.stats().blocks_free == engine.stats().blocks_total


def test_the_server_reports_a_contained_fault_and_keeps_serving(tiny):
    async def go():
        config = ServiceConfig(engine=EngineConfig(max_batch=4, cache=CacheConfig(num_blocks=256)), lab=True,
                               fault_step=2, debug=True)
        async with running_service(config, tiny) as svc:
            hit = await svc.call("/v1/stream", {"prompt": PROMPT, "max_new_tokens": 20, "ignore_eos": True})
            assert hit.last["error"]["type"] == "internal_error"
            health = await svc.get("/healthz")
            assert health.status == 200 and health.json()["status"] == "degraded"
            assert "injected engine fault in step 2" in health.json()["last_engine_error"]
            ok = await svc.call("/v1/stream", {"prompt": PROMPT, "max_new_tokens": 5, "ignore_eos": True})
            assert ok.last["finish_reason"] == "length"
            assert_service_clean(await svc.settle())
    asyncio.run(go())


def test_a_broken_engine_refuses_new_work_with_503_and_drains(tiny):
    async def go():
        config = ServiceConfig(engine=EngineConfig(max_batch=4, cache=CacheConfig(num_blocks=256)), lab=True,
                               fault_rate=1.0, debug=True)
        async with running_service(config, tiny) as svc:
            for _ in range(3):
                await svc.call("/v1/stream", {"prompt": PROMPT, "max_new_tokens": 5, "ignore_eos": True})
            health = await svc.get("/healthz")
            assert health.status == 503 and health.json()["status"] == "failed"
            refused = await svc.call("/v1/stream", {"prompt": PROMPT, "max_new_tokens": 5})
            assert refused.status == 503 and refused.json()["error"]["type"] == "shutting_down"
            stats = await svc.settle()
            assert stats["blocks_free"] == stats["blocks_total"] and stats["double_release_attempts"] == 0
    asyncio.run(go())


def test_faults_need_the_lab():
    with pytest.raises(ValueError, match="engine faults need --lab"):
        ServiceConfig(fault_step=3)


def test_a_scenario_with_faults_validates_again_after_a_dump():
    """`faults:` is copied into the server's options; the dumped scenario (a trace's config) must
    validate again, while a conflicting server value is still refused."""
    from harness.format.scenario import Scenario
    from harness.format.load import load_by_name

    scenario = load_by_name("engine_fault_step")
    again = Scenario.model_validate(scenario.model_dump(mode="json"))
    assert again.server.fault_step == scenario.server.fault_step == 20
    data = scenario.model_dump(mode="json")
    data["server"]["fault_step"] = 5
    with pytest.raises(ValueError, match="not both"):
        Scenario.model_validate(data)
