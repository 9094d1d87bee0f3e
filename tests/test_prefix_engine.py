"""Prefix caching in the engine (EngineConfig.prefix_caching): a later request whose prompt shares
full chunks with an earlier one starts after them, its tokens equal its solo run with the cache
off, and a drained engine holds only free or unowned cached blocks, whole again once evicted."""

import random

import pytest

from streamlab.config import CacheConfig, EngineConfig
from streamlab.engine.engine import BatchEngine
from streamlab.sampling import SamplingParams
from tests.helpers import assert_clean, drain

# Times nothing (read for it): may run beside another such item under xdist (harness/cores_lock.py).
pytestmark = pytest.mark.shares_cores

SYSTEM = [random.Random(7).randrange(1, 8192) for _ in range(70)]  # a shared system prompt: 4 full chunks of 16


def engine(tiny, caching: bool, num_blocks: int = 64, max_batch: int = 4) -> BatchEngine:
    return BatchEngine(tiny.model, EngineConfig(max_batch=max_batch, cache=CacheConfig(num_blocks, 8),
                                                step_token_budget=48, prefill_chunk_tokens=16,
                                                prefix_caching=caching))


def turn(i: int) -> list[int]:
    return SYSTEM + [random.Random(i).randrange(1, 8192) for _ in range(5 + 3 * i)]


def solo(tiny, prompt: list[int], n: int = 12) -> list[int]:
    e = engine(tiny, caching=False, max_batch=1)
    e.submit("solo", prompt, SamplingParams(max_new_tokens=n, ignore_eos=True))
    return drain(e).tokens["solo"]


def test_a_shared_prefix_is_computed_once_and_every_stream_equals_its_solo_run_without_the_cache(tiny):
    e = engine(tiny, caching=True)
    e.submit("first", turn(0), SamplingParams(max_new_tokens=12, ignore_eos=True))
    first = drain(e).tokens["first"]
    assert first == solo(tiny, turn(0))
    before = e.stats()
    assert before.blocks_cached > 0 and before.blocks_evictable == before.blocks_cached  # kept, no owner
    for i in (1, 2, 3):  # later requests at once, each sharing the system prompt
        e.submit(f"r{i}", turn(i), SamplingParams(max_new_tokens=12, ignore_eos=True))
    later = drain(e).tokens
    stats = e.stats()
    # 70 shared tokens: the first 64 (4 whole chunks of 16) come from the cache, for each of the three
    assert stats.prefix_hit_blocks - before.prefix_hit_blocks == 3 * 64 // 8, stats
    for i in (1, 2, 3):
        assert later[f"r{i}"] == solo(tiny, turn(i)), i
    assert e.check_invariants() == [] and e.check_released() == []
    assert stats.blocks_free + stats.blocks_evictable == stats.blocks_total and stats.blocks_reserved == 0
    assert e.blocks.evict_all() == stats.blocks_evictable
    assert_clean(e)


def test_eviction_makes_room_for_admission_and_identity_holds_under_pressure(tiny):
    """A pool too small to keep every prompt: unowned cached blocks are evicted least recently used."""
    e = engine(tiny, caching=True, num_blocks=24, max_batch=2)
    prompts = {f"p{i}": [random.Random(100 + i).randrange(1, 8192) for _ in range(40)] for i in range(6)}
    for rid, prompt in prompts.items():
        e.submit(rid, prompt, SamplingParams(max_new_tokens=6, ignore_eos=True))
    got = drain(e).tokens
    assert e.stats().prefix_evictions > 0
    for rid, prompt in prompts.items():
        assert got[rid] == solo(tiny, prompt, 6), rid
    assert e.check_invariants() == [] and e.check_released() == []
    e.blocks.evict_all()
    assert_clean(e)


def test_with_the_cache_off_nothing_is_kept(tiny):
    e = engine(tiny, caching=False)
    for i in (0, 1):
        e.submit(f"r{i}", turn(i), SamplingParams(max_new_tokens=4, ignore_eos=True))
    drain(e)
    stats = e.stats()
    assert (stats.blocks_cached, stats.prefix_hit_blocks) == (0, 0)
    assert_clean(e)


def test_prefix_caching_needs_chunked_prefill_in_whole_blocks():
    with pytest.raises(ValueError, match="prefix_caching needs chunked prefill"):
        EngineConfig(step_token_budget=0, prefix_caching=True)
    with pytest.raises(ValueError, match="multiple of the block size"):
        EngineConfig(cache=CacheConfig(64, 16), prefill_chunk_tokens=24, prefix_caching=True)
