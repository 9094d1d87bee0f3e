"""Identity in half precision (the chapter's exercise 7): the overlap workload (32 prompts,
64 tokens, all submitted at once) in-process on `gpt2-small-random`, each stream against the
same request alone, in bfloat16 and in float32, greedy and seeded-sampled. For each divergent
stream: the first divergent token and the top-2 logit margin of the solo run at that point."""

from __future__ import annotations

import time

from benchmarks.overlap import MAX_TOKENS, MODEL, workload
from streamlab.config import CacheConfig, EngineConfig
from streamlab.engine.engine import BatchEngine
from streamlab.models import load_model
from streamlab.sampling import SamplingParams, top2_margin

MODES = {"greedy": {"temperature": 0.0}, "sampled": {"temperature": 0.8, "top_p": 0.95}}


def params(mode: str, i: int) -> SamplingParams:
    seed = 1000 + i if mode == "sampled" else None
    return SamplingParams(max_new_tokens=MAX_TOKENS, ignore_eos=True, seed=seed, **MODES[mode])


def run_all(model, prompts: list[list[int]], dtype: str, mode: str, max_batch: int) -> list[list[int]]:
    engine = BatchEngine(model, EngineConfig(max_batch=max_batch, cache=CacheConfig(1024, 16), dtype=dtype))
    for i, p in enumerate(prompts):
        engine.submit(str(i), p, params(mode, i))
    out: dict[str, list[int]] = {str(i): [] for i in range(len(prompts))}
    for _ in range(10_000):
        if not engine.has_work():
            break
        for t in engine.step().tokens:
            out[t.request_id].append(t.token_id)
    return [out[str(i)] for i in range(len(prompts))]


def margin_at(model, dtype: str, context: list[int]) -> float:
    engine = BatchEngine(model, EngineConfig(max_batch=1, cache=CacheConfig(32, 16), dtype=dtype))
    cfg = CacheConfig(num_blocks=CacheConfig().blocks_for(len(context)) + 1)
    cache = engine.model.new_cache(cfg)
    import torch
    return top2_margin(engine.model.prefill(context, torch.arange(len(context)), cache))


def run(say) -> dict:
    loaded = load_model(MODEL)
    prompts = [loaded.tokenizer.encode(p) for p in workload()]
    out: dict = {"model": MODEL, "streams": len(prompts), "tokens": MAX_TOKENS, "runs": []}
    for dtype in ("float32", "bfloat16"):
        for mode in MODES:
            say(f"precision: {dtype}, {mode}")
            t0 = time.perf_counter()
            together = run_all(loaded.model, prompts, dtype, mode, len(prompts))
            seconds = time.perf_counter() - t0
            divergent = []
            for i, p in enumerate(prompts):
                got, solo = together[i], _solo(loaded.model, p, dtype, mode, i)
                k = next((j for j, (a, b) in enumerate(zip(solo, got)) if a != b), None)
                if k is not None:
                    divergent.append({"stream": i, "token": k, "solo": solo[k], "batched": got[k],
                                      "margin": margin_at(loaded.model, dtype, p + solo[:k])})
            out["runs"].append({"dtype": dtype, "sampling": mode, "identical": len(prompts) - len(divergent),
                                "divergent": divergent, "together_s": seconds})
    return out


def _solo(model, prompt: list[int], dtype: str, mode: str, index: int) -> list[int]:
    engine = BatchEngine(model, EngineConfig(max_batch=1, cache=CacheConfig(64, 16), dtype=dtype))
    engine.submit("s", prompt, params(mode, index))
    tokens: list[int] = []
    for _ in range(10_000):
        if not engine.has_work():
            break
        tokens += [t.token_id for t in engine.step().tokens]
    return tokens
