"""A sequence's tokens do not depend on its neighbours: batched runs equal solo runs, bit for bit.

Thousands of tokens across batch limits 1-32, prompts of different lengths, sequences that
end at different times (so others join late), and sampled requests with their own seeds.
"""

from __future__ import annotations

import random

import pytest
import torch

from streamlab.config import CacheConfig, EngineConfig
from streamlab.engine.engine import BatchEngine
from streamlab.models import load_model
from streamlab.prompts import shipped_prompts
from streamlab.sampling import SamplingParams
from tests.helpers import assert_clean, divergence, drain

# Times nothing (read for it): may run beside another such item under xdist (harness/cores_lock.py).
pytestmark = pytest.mark.shares_cores

N_PROMPTS = 32


@pytest.fixture(scope="module")
def workload(tiny):
    rng = random.Random(7)
    texts = shipped_prompts()[:N_PROMPTS]
    prompts = {f"p{i}": tiny.tokenizer.encode(t) for i, t in enumerate(texts)}
    lengths = {rid: rng.randint(64, 192) for rid in prompts}  # they end at different steps
    return prompts, lengths


@pytest.fixture(scope="module")
def solo(tiny, workload):
    prompts, lengths = workload
    out = {}
    for rid, ids in prompts.items():
        engine = BatchEngine(tiny.model, EngineConfig(max_batch=1))
        engine.submit(rid, ids, SamplingParams(max_new_tokens=lengths[rid], ignore_eos=True))
        out[rid] = drain(engine).tokens[rid]
    return out


@pytest.mark.parametrize("max_batch", [1, 2, 4, 8, 16, 32])
def test_batched_tokens_equal_solo_runs(tiny, workload, solo, max_batch):
    prompts, lengths = workload
    engine = BatchEngine(tiny.model, EngineConfig(max_batch=max_batch, cache=CacheConfig(num_blocks=1024)))
    for rid, ids in prompts.items():
        engine.submit(rid, ids, SamplingParams(max_new_tokens=lengths[rid], ignore_eos=True))
    out = drain(engine)
    total = sum(len(t) for t in out.tokens.values())
    assert total == sum(lengths.values()) and total > 3000
    problems = [f"{rid}: {msg}" for rid in prompts
                if (msg := divergence(tiny.model, prompts[rid], solo[rid], out.tokens[rid]))]
    assert problems == [], "\n".join(problems)
    assert_clean(engine)


def test_late_joiners_equal_solo_runs(tiny, workload, solo):
    """Requests submitted while others are mid-stream, a few at a time."""
    prompts, lengths = workload
    engine = BatchEngine(tiny.model, EngineConfig(max_batch=32))
    order = list(prompts)
    out = None
    for start in range(0, len(order), 4):
        for rid in order[start:start + 4]:
            engine.submit(rid, prompts[rid], SamplingParams(max_new_tokens=lengths[rid], ignore_eos=True))
        for _ in range(17):
            out = drain(engine, out, max_steps=100_000) if start + 4 >= len(order) else _steps(engine, out)
    for rid in order:
        assert divergence(tiny.model, prompts[rid], solo[rid], out.tokens[rid]) is None, rid
    assert_clean(engine)


def _steps(engine, out):
    from tests.helpers import run_steps
    return run_steps(engine, 1, out)


def test_sampled_requests_give_the_same_tokens_alone_or_batched(tiny, workload):
    prompts, _ = workload
    params = {rid: SamplingParams(max_new_tokens=48, temperature=0.9, top_k=50, top_p=0.95, seed=i, ignore_eos=True)
              for i, rid in enumerate(prompts)}
    alone = {}
    for rid, ids in list(prompts.items())[:8]:
        engine = BatchEngine(tiny.model, EngineConfig(max_batch=1))
        engine.submit(rid, ids, params[rid])
        alone[rid] = drain(engine).tokens[rid]
    engine = BatchEngine(tiny.model, EngineConfig(max_batch=8))
    for rid in alone:
        engine.submit(rid, prompts[rid], params[rid])
    together = drain(engine).tokens
    assert together == alone
    assert len({tuple(t) for t in alone.values()}) == len(alone)


def test_divergence_report_names_the_token_and_the_margin(tiny, workload, solo):
    prompts, _ = workload
    rid = "p0"
    changed = list(solo[rid])
    changed[5] = (changed[5] + 1) % 8192
    message = divergence(tiny.model, prompts[rid], solo[rid], changed)
    assert message is not None and "token 5" in message and "margin" in message


@pytest.mark.parametrize("preset,new_tokens", [("tiny", 96), ("gpt2-small-random", 12)])
def test_greedy_tokens_equal_transformers_generate(preset, new_tokens):
    loaded = load_model(preset)
    hf = loaded.hf_model()
    engine = BatchEngine(loaded.model, EngineConfig(max_batch=4))
    prompts = {f"p{i}": loaded.tokenizer.encode(t) for i, t in enumerate(shipped_prompts()[10:13])}
    for rid, ids in prompts.items():
        engine.submit(rid, ids, SamplingParams(max_new_tokens=new_tokens, ignore_eos=True))
    ours = drain(engine).tokens
    for rid, ids in prompts.items():
        with torch.inference_mode():
            generated = hf.generate(torch.tensor([ids]), max_new_tokens=new_tokens, do_sample=False,
                                    pad_token_id=0, eos_token_id=None)
        theirs = generated[0, len(ids):].tolist()
        assert ours[rid] == theirs, divergence(loaded.model, ids, theirs, ours[rid])
