"""Chunked prefill beside decode: the budget, the chunk boundaries, and identity with the solo run."""

import random

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from streamlab.config import CacheConfig, EngineConfig
from streamlab.engine.engine import BatchEngine
from streamlab.sampling import SamplingParams
from tests.helpers import assert_clean, drain, run_steps

# Times nothing (read for it): may run beside another such item under xdist (harness/cores_lock.py).
pytestmark = pytest.mark.shares_cores


def ids(n: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(1, 8192) for _ in range(n)]


def chunked(tiny, budget: int, chunk: int = 8, max_batch: int = 8) -> BatchEngine:
    return BatchEngine(tiny.model, EngineConfig(max_batch=max_batch, cache=CacheConfig(256, 16),
                                                step_token_budget=budget, prefill_chunk_tokens=chunk))


def params(i: int, n: int) -> SamplingParams:
    # Even requests greedy, odd ones sampled with their own seed: both must be reproducible.
    if i % 2:
        return SamplingParams(max_new_tokens=n, temperature=0.9, top_p=0.95, seed=1000 + i, ignore_eos=True)
    return SamplingParams(max_new_tokens=n, ignore_eos=True)


_solo_cache: dict = {}


def solo(tiny, chunk: int, prompt: tuple[int, ...], i: int, n: int) -> list[int]:
    """The request alone on an engine cut at the same chunk size (boundaries are the sequence's own)."""
    key = (chunk, prompt, i, n)
    if key not in _solo_cache:
        engine = chunked(tiny, budget=chunk, chunk=chunk, max_batch=1)
        engine.submit("solo", list(prompt), params(i, n))
        _solo_cache[key] = drain(engine).tokens["solo"]
    return _solo_cache[key]


def test_a_step_carries_decodes_first_then_chunks_within_the_budget(tiny):
    engine = chunked(tiny, budget=18, chunk=8)
    engine.submit("a", ids(20, 1), params(0, 4))  # chunks 0-8, 8-16, 16-20
    engine.submit("b", ids(6, 2), params(0, 4))
    first = engine.step()
    assert (first.decoded, first.prefill_tokens, first.prefilled) == (0, 16, 0)  # 8 + 8; 16-20 is not cut to fit
    second = engine.step()
    # a's last chunk (4) and b's only chunk (6): both prompts end here and make their first tokens.
    assert (second.decoded, second.prefill_tokens, second.prefilled) == (0, 10, 2)
    assert sorted(t.request_id for t in second.tokens) == ["a", "b"]
    third = engine.step()
    assert (third.decoded, third.prefill_tokens) == (2, 0)
    drain(engine)
    assert_clean(engine)


def test_decodes_take_the_budget_first_but_a_prompt_always_moves(tiny):
    engine = chunked(tiny, budget=3, chunk=8, max_batch=8)
    for i in range(4):
        engine.submit(f"r{i}", ids(5, i), params(0, 6))
    # Each step: every ready stream decodes; one chunk still runs though the budget is spent.
    shape = [(o.decoded, o.prefill_tokens) for o in (engine.step() for _ in range(5))]
    assert shape == [(0, 5), (1, 5), (2, 5), (3, 5), (4, 0)]
    drain(engine)
    assert_clean(engine)


def test_a_long_prompt_spans_several_steps_at_fixed_boundaries(tiny):
    engine = chunked(tiny, budget=12, chunk=5)
    engine.submit("long", ids(23, 3), params(0, 2))
    cuts = []
    for _ in range(3):
        before = engine.scheduler.running[0].prefilled if engine.scheduler.running else 0
        out = engine.step()
        cuts.append((before, before + out.prefill_tokens))
    # 12 tokens a step, cut only at multiples of 5: 0-10 (15 would exceed), 10-20, 20-23.
    assert cuts == [(0, 10), (10, 20), (20, 23)]
    drain(engine)
    assert_clean(engine)


def test_paused_and_cancelled_prefills_release_once(tiny):
    engine = chunked(tiny, budget=8, chunk=4)
    engine.submit("a", ids(30, 4), params(0, 3))
    engine.submit("b", ids(30, 5), params(0, 3))
    engine.step()
    engine.cancel("a")  # mid-prefill
    out = drain(engine)
    assert out.finished["a"].completion_tokens == 0
    assert len(out.tokens["b"]) == 3
    assert engine.stats().releases == 2
    assert_clean(engine)


@pytest.mark.parametrize("budget", [1, 7, 16, 40, 200])
def test_overlapping_streams_equal_their_solo_runs_at_any_budget(tiny, budget):
    engine = chunked(tiny, budget=budget, chunk=8)
    prompts = [tuple(ids(3 + 7 * i, 10 + i)) for i in range(6)]
    for i, p in enumerate(prompts):
        engine.submit(str(i), list(p), params(i, 5 + i))
    got = drain(engine).tokens
    for i, p in enumerate(prompts):
        assert got[str(i)] == solo(tiny, 8, p, i, 5 + i), f"stream {i} differs from its solo run"
    assert_clean(engine)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(budget=st.integers(1, 64), chunk=st.sampled_from([4, 8, 16]),
       arrivals=st.lists(st.tuples(st.integers(0, 6), st.integers(1, 40), st.integers(1, 8)), min_size=1, max_size=6))
def test_identity_for_any_budget_and_arrival_pattern(tiny, budget, chunk, arrivals):
    """Requests arrive after any number of steps, with any prompt length: each stream's tokens
    are those of its solo run at the same chunk size."""
    engine = chunked(tiny, budget=budget, chunk=chunk, max_batch=4)
    expected, got = {}, None
    for i, (wait, length, n) in enumerate(arrivals):
        got = run_steps(engine, wait, got)
        prompt = tuple(ids(length, 100 + i))
        engine.submit(str(i), list(prompt), params(i, n))
        expected[str(i)] = solo(tiny, chunk, prompt, i, n)
    got = drain(engine, got)
    assert got.tokens == expected
    assert_clean(engine)


def test_a_prompts_cache_has_the_same_bits_beside_others_at_gpt2_small_width():
    """Tokens can agree while bits drift (a wide argmax margin hides it): compare the K/V the
    prompt left in the cache, every layer, beside decodes and other chunks and alone."""
    import torch

    from streamlab.models import load_model

    model = load_model("gpt2-small-random").model

    def engine(budget: int, max_batch: int) -> BatchEngine:
        return BatchEngine(model, EngineConfig(max_batch=max_batch, cache=CacheConfig(256, 16),
                                               step_token_budget=budget, prefill_chunk_tokens=32))

    def prompt_kv(e: BatchEngine, seq) -> torch.Tensor:
        slots = e.cache.slots_for(seq.block_table, 0, len(seq.prompt_ids))
        return torch.cat((e.cache.k[:, :, slots], e.cache.v[:, :, slots]))

    busy = engine(23, 4)
    for i in range(4):  # 33 tokens: a 32-token chunk, then a lone one-row chunk beside decodes
        busy.submit(str(i), ids((33, 20, 65, 22)[i], i), SamplingParams(max_new_tokens=200, ignore_eos=True))
    for _ in range(12):
        busy.step()
    for seq in busy.scheduler.running:
        alone = engine(32, 1)
        alone.submit("s", seq.prompt_ids, SamplingParams(max_new_tokens=200, ignore_eos=True))
        for _ in range(3):
            alone.step()
        assert torch.equal(prompt_kv(busy, seq), prompt_kv(alone, alone.scheduler.running[0])), \
            f"request {seq.request_id} ({len(seq.prompt_ids)} prompt tokens): cache bits differ"
