"""The deadline gate: the predictor against scripted queues, refusal before the first byte, and
dropping a waiter whose deadline passed, with its blocks (none) and stream accounted for."""

import asyncio
import time
from contextlib import asynccontextmanager

import pytest

from streamlab.hub import hub as hub_module
from streamlab.config import CacheConfig, EngineConfig, ServiceConfig
from streamlab.deadline import QueueSnapshot, StepCostModel, predict_ttft_s
from tests.asgi import running_service
from tests.asgi import assert_clean
from tests.test_app import PROMPT


def costs(fixed: float, per_row: float) -> StepCostModel:
    """A model that has seen steps costing exactly fixed + per_row x rows."""
    model = StepCostModel(min_points=2)
    for rows in (1, 8, 32, 64, 128):
        model.observe(rows, fixed + per_row * rows)
    return model


def snapshot(**kw) -> QueueSnapshot:
    base = dict(max_batch=8, step_token_budget=64, chunk_tokens=16, running_unprefilled=[], running_remaining=[],
                waiting_prompts=[], waiting_outputs=[])
    return QueueSnapshot(**{**base, **kw})


def test_the_cost_model_fits_the_line_it_is_fed_and_starts_from_a_prior():
    model = costs(0.010, 0.0005)
    assert model.coefficients() == pytest.approx((0.010, 0.0005))
    assert StepCostModel().coefficients() == (0.01, 0.001)  # nothing seen yet
    flat = StepCostModel(min_points=2)
    for _ in range(3):
        flat.observe(10, 0.02)  # no spread in size: all of it per row
    assert flat.step_s(10) == pytest.approx(0.02)


def test_an_idle_server_predicts_one_step_for_a_short_prompt():
    c = costs(0.010, 0.001)
    # 20 tokens fit in one 64-token step: half the step in progress, then that step.
    assert predict_ttft_s(snapshot(), 20, c) == pytest.approx(0.5 * (0.010 + 0.020) + (0.010 + 0.064))


def test_tokens_ahead_and_running_decodes_lengthen_the_prediction():
    c = costs(0.010, 0.001)
    q = snapshot(running_unprefilled=[0, 0, 0, 0, 30], running_remaining=[50, 50, 50, 50, 60],
                 waiting_prompts=[40, 40])
    # 4 decoding; ahead 30 + 80 + 20 = 130 tokens; room 64 - 4 = 60 a step: 3 steps of 4 + 60 rows.
    expected = 0.5 * (0.010 + 0.001 * (4 + 64)) + 3 * (0.010 + 0.001 * 64)
    assert predict_ttft_s(q, 20, c) == pytest.approx(expected)
    assert predict_ttft_s(q, 20, c) > predict_ttft_s(snapshot(), 20, c)


def test_a_full_batch_waits_for_slots_in_queue_order():
    c = costs(0.010, 0.001)
    full = snapshot(max_batch=2, running_unprefilled=[0, 0], running_remaining=[100, 7], waiting_prompts=[10],
                    waiting_outputs=[30])
    # Slots free at 7 and 100 steps; the waiter takes the one at 7 for 30 steps (free at 37): this
    # request gets a slot after 37 full-batch steps, then its own 10 tokens in one step.
    expected = 37 * (0.010 + 0.002) + (0.010 + 0.001 * (2 + 62))
    assert predict_ttft_s(full, 10, c) == pytest.approx(expected)
    longer = snapshot(**{**full.__dict__, "waiting_prompts": [10, 10], "waiting_outputs": [30, 30]})
    assert predict_ttft_s(longer, 10, c) == pytest.approx(67 * 0.012 + (0.010 + 0.064))  # 37 + 30


def test_without_chunking_the_prefill_runs_whole_before_the_decode():
    c = costs(0.010, 0.001)
    q = snapshot(step_token_budget=0, running_remaining=[30, 30], waiting_prompts=[100], waiting_outputs=[5])
    expected = 0.5 * (0.010 + 0.001 * (2 + 150)) + (0.010 + 0.150) + (0.010 + 0.002)
    assert predict_ttft_s(q, 50, c) == pytest.approx(expected)


@asynccontextmanager
async def slot_taken(svc):
    """The one batch slot busy with a long stream until the block ends (its client then leaves)."""
    gone = asyncio.Event()
    running = asyncio.ensure_future(svc.call("/v1/stream", {"prompt": PROMPT, "max_new_tokens": 400,
                                                            "ignore_eos": True}, disconnect=gone))
    await svc.until(lambda s: s["running"] == 1)
    await svc.until(lambda _: svc.hub.step_costs.measured(), deadline_s=2.0)  # the gate predicts from here
    try:
        yield
    finally:
        gone.set()
        await running


def gated(**kw) -> ServiceConfig:
    return ServiceConfig(engine=EngineConfig(max_batch=1, cache=CacheConfig(num_blocks=256)), admission="deadline",
                         **kw)


@pytest.mark.asyncio
async def test_an_unmeetable_deadline_is_refused_before_the_first_byte(tiny):
    async with running_service(gated(), tiny) as svc:
        async with slot_taken(svc):
            refused = await svc.call("/v1/stream", {"prompt": PROMPT, "max_new_tokens": 4, "ttft_deadline_ms": 5})
            assert refused.status == 429 and int(refused.headers["retry-after"]) >= 1
            assert refused.json()["error"]["type"] == "deadline_unmeetable"
            assert refused.events == []  # no stream was started
            # The same route without a deadline is not gated; an OpenAI request carries it too.
            chat = await svc.call("/v1/completions", {"model": "tiny", "prompt": PROMPT, "max_tokens": 2,
                                                      "ttft_deadline_ms": 5})
            assert chat.status == 429 and chat.json()["error"]["code"] == "deadline_unmeetable"
        stats = await svc.settle()
        assert_clean(stats)
        assert stats["deadline_refused"] == 2 and stats["requests_accepted"] == 1


@pytest.mark.asyncio
async def test_a_fresh_server_admits_what_it_cannot_yet_predict(tiny):
    """No step measured yet: the prior (10 ms + 1 ms per row) would call 20 ms unmeetable for any
    prompt, and a server that refuses everything never runs a step to learn otherwise."""
    async with running_service(gated(), tiny) as svc:
        assert not svc.hub.step_costs.measured()
        reply = await svc.call("/v1/stream", {"prompt": PROMPT, "max_new_tokens": 16, "ignore_eos": True,
                                              "ttft_deadline_ms": 20})
        assert reply.status == 200 and len(reply.tokens) == 16
        assert svc.hub.step_costs.measured()
        assert_clean(await svc.settle())


@pytest.mark.asyncio
async def test_a_meetable_deadline_is_admitted_and_served(tiny):
    async with running_service(gated(ttft_deadline_ms=30_000), tiny) as svc:
        reply = await svc.call("/v1/stream", {"prompt": PROMPT, "max_new_tokens": 4, "ignore_eos": True})
        assert reply.status == 200 and len(reply.tokens) == 4
        assert_clean(await svc.settle())


@pytest.mark.asyncio
async def test_a_waiter_whose_deadline_passes_is_dropped_with_an_error_event(tiny, monkeypatch):
    """The predictor is scripted to say yes; the one slot stays busy past the deadline."""
    monkeypatch.setattr(hub_module, "predict_ttft_s", lambda *a: 0.0)
    async with running_service(gated(), tiny) as svc:
        async with slot_taken(svc):
            late = await svc.call("/v1/stream", {"prompt": PROMPT, "max_new_tokens": 4, "ttft_deadline_ms": 50})
            assert late.status == 200
            assert [e.event for e in late.events] == ["start", "error"]
            assert late.last["error"]["type"] == "deadline_expired"
        stats = await svc.settle()
        assert_clean(stats)
        assert stats["cancellations"]["deadline_expired"] == 1
        assert stats["finished_by_reason"]["cancelled"] == 2  # the waiter (never admitted) and the one that left


@pytest.mark.asyncio
async def test_an_admitted_request_is_not_dropped_when_its_deadline_passes(tiny, monkeypatch):
    """A 50 ms deadline: an idle server admits within it on any machine (at 1 ms, a busy CI
    machine's step thread once took longer and the waiter was rightly dropped), and 300 tokens
    outlive it (about 0.3 s here; the test says so if they did not)."""
    monkeypatch.setattr(hub_module, "predict_ttft_s", lambda *a: 0.0)
    async with running_service(gated(), tiny) as svc:
        began = time.monotonic()
        reply = await svc.call("/v1/stream", {"prompt": PROMPT, "max_new_tokens": 300, "ignore_eos": True,
                                              "ttft_deadline_ms": 50})
        assert time.monotonic() - began > 0.05, "the stream ended before its deadline: nothing was tested"
        assert reply.last.get("finish_reason") == "length" and len(reply.tokens) == 300
        assert_clean(await svc.settle())
