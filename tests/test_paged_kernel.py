"""The paged attention kernel: the gather path's results to float tolerance, and a sequence's
bits independent of the batch around it (the property identity rests on)."""

import math
import random

import pytest
import torch
import torch.nn.functional as F

from streamlab.engine import paged_kernel
from streamlab.config import CacheConfig, EngineConfig
from streamlab.engine.engine import BatchEngine
from streamlab.sampling import SamplingParams
from tests.helpers import assert_clean, drain

# Times nothing (read for it): may run beside another such item under xdist (harness/cores_lock.py).
pytestmark = [pytest.mark.skipif(paged_kernel.unavailable() is not None, reason=str(paged_kernel.unavailable())), pytest.mark.shares_cores]

NH, HS, BS, SLOTS = 12, 64, 16, 64 * 16


def cache_and_tables(seed: int, contexts: list[int]):
    gen = torch.Generator().manual_seed(seed)
    k, v = torch.randn(NH, SLOTS, HS, generator=gen), torch.randn(NH, SLOTS, HS, generator=gen)
    blocks = list(range(SLOTS // BS))
    random.Random(seed).shuffle(blocks)  # tables point all over the pool
    nb = max(-(-c // BS) for c in contexts)
    tables, start = [], 0
    for c in contexts:
        need = -(-c // BS)
        tables.append(blocks[start:start + need] + [0] * (nb - need))
        start += need
    q = torch.randn(len(contexts), NH, HS, generator=gen)
    return q, k, v, torch.tensor(tables), torch.tensor(contexts)


def reference(q, k, v, tables, contexts) -> torch.Tensor:
    out = []
    for b, c in enumerate(contexts.tolist()):
        slots = torch.tensor([tables[b, p // BS].item() * BS + p % BS for p in range(c)])
        out.append(F.scaled_dot_product_attention(q[b][:, None], k[:, slots], v[:, slots])[:, 0])
    return torch.stack(out)


def test_it_matches_attention_over_the_gathered_positions():
    contexts = [1, 15, 16, 17, 100, 333]
    q, k, v, tables, ctx = cache_and_tables(0, contexts)
    got = paged_kernel.paged_attention(q, k, v, tables, ctx, BS, 1 / math.sqrt(HS))
    assert torch.allclose(got, reference(q, k, v, tables, ctx), rtol=1e-5, atol=1e-6)


def test_a_sequences_bits_do_not_depend_on_the_batch():
    contexts = [7, 40, 129, 300, 16, 64, 1, 250]
    q, k, v, tables, ctx = cache_and_tables(1, contexts)
    scale = 1 / math.sqrt(HS)
    together = paged_kernel.paged_attention(q, k, v, tables, ctx, BS, scale)
    for b, c in enumerate(contexts):
        nb = -(-c // BS)
        alone = paged_kernel.paged_attention(q[b:b + 1], k, v, tables[b:b + 1, :nb], ctx[b:b + 1], BS, scale)
        assert torch.equal(alone[0], together[b]), f"sequence {b} (context {c})"


def test_streams_equal_their_solo_runs_through_the_kernel_at_gpt2_small_width():
    from streamlab.models import load_model

    model = load_model("gpt2-small-random").model
    rng = random.Random(3)
    prompts = [[rng.randrange(1, 8192) for _ in range(rng.randint(5, 70))] for _ in range(6)]
    params = SamplingParams(max_new_tokens=24, ignore_eos=True)

    def engine(max_batch: int) -> BatchEngine:
        e = BatchEngine(model, EngineConfig(max_batch=max_batch, cache=CacheConfig(128, 16),
                                            decode_attention="kernel"))
        assert e.use_kernel
        return e

    busy = engine(6)
    for i, p in enumerate(prompts):
        busy.submit(str(i), p, params)
    got = drain(busy).tokens
    for i, p in enumerate(prompts):
        alone = engine(1)
        alone.submit("s", p, params)
        assert drain(alone).tokens["s"] == got[str(i)], f"stream {i}"
    assert_clean(busy)
