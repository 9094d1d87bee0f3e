"""Overlap: 1..32 simultaneous streams over HTTP on our server, and the in-process bound (the
peers, interleaved with ours on equal threads: benchmarks/peer.py).

The chapter's experiment: 32 prompts of about 200 characters, 64 greedy tokens each; at level
N the first N prompts are sent at once from separate connections, three times (repetitions
interleaved across levels, so drift on a shared machine hits every level). Back-to-back is
each prompt alone, one after another; those solo streams are also the identity reference.
"""

from __future__ import annotations

import time
from pathlib import Path

import torch

from benchmarks.common import spread
from harness.machine.cost_model import decode_only
from harness.record.trace import percentile
from harness.machine.cores import server_threads, torch_threads
from benchmarks.servers import ours
from benchmarks.streams import STREAMLAB, Api, TimedStream, burst
from streamlab.bench_step import _CACHE_ARG
from streamlab.config import CacheConfig, EngineConfig
from streamlab.engine.engine import BatchEngine
from streamlab.idle import pool_whole
from streamlab.models import load_model
from streamlab.prompts import prompts_near
from streamlab.sampling import SamplingParams

MODEL = "gpt2-small-random"
LEVELS = (1, 2, 4, 8, 16, 32)
MAX_TOKENS = 64


def workload(count: int = 32) -> list[str]:
    return prompts_near(200, count)


def summarize_burst(n: int, makespan: float, streams: list[TimedStream], solo: dict[int, TimedStream] | None,
                    ) -> dict:
    ttfts = [s.ttft_s for s in streams]
    gaps = [g for s in streams for g in s.gaps_s]
    row = {"n": n, "makespan_s": makespan, "tokens_per_s": n * MAX_TOKENS / makespan,
           "ttft_p50_s": percentile(ttfts, 50), "ttft_p99_s": percentile(ttfts, 99), "ttft_min_s": min(ttfts),
           "gap_p50_s": percentile(gaps, 50), "gap_p99_s": percentile(gaps, 99)}
    if solo is not None:
        ids = [s.token_ids if s.token_ids else s.text for s in streams]
        ref = [solo[s.prompt_index].token_ids if s.token_ids else solo[s.prompt_index].text for s in streams]
        row["identical"] = sum(a == b for a, b in zip(ids, ref))
    return row


def by_level(rows: list[dict]) -> list[dict]:
    """Per level: median, min and max of each figure over the repetitions."""
    out = []
    for n in sorted({r["n"] for r in rows}):
        reps = [r for r in rows if r["n"] == n]
        level = {"n": n, "repetitions": len(reps)}
        for key in ("makespan_s", "tokens_per_s", "ttft_p50_s", "ttft_p99_s", "gap_p50_s", "gap_p99_s"):
            level[key] = spread([r[key] for r in reps])
        if "identical" in reps[0]:
            level["identical"] = sum(r["identical"] for r in reps)
            level["streams"] = n * len(reps)
        out.append(level)
    return out


async def levels(api: Api, port: int, prompts: list[str], levels_: tuple[int, ...], reps: int,
                 solo: dict[int, TimedStream] | None, on_window=None, keep_streams=None) -> list[dict]:
    rows = []
    for _ in range(reps):
        for n in levels_:
            began = time.monotonic()
            makespan, streams = await burst(api, port, prompts[:n], MAX_TOKENS)
            rows.append(summarize_burst(n, makespan, streams, solo))
            if on_window is not None:
                on_window(n, began, time.monotonic())
            if keep_streams is not None:
                keep_streams(n, streams)
    return rows


async def back_to_back(api: Api, port: int, prompts: list[str]) -> tuple[dict, dict[int, TimedStream]]:
    solo: dict[int, TimedStream] = {}
    durations = []
    for i, prompt in enumerate(prompts):
        makespan, (stream,) = await burst(api, port, [prompt], MAX_TOKENS)
        stream.prompt_index = i
        solo[i] = stream
        durations.append(makespan)
    return ({"total_s": sum(durations), "stream_s": spread(durations),
             "ttft_s": spread([s.ttft_s for s in solo.values()]),
             "gap_p50_s": percentile([g for s in solo.values() for g in s.gaps_s], 50),
             "tokens_per_s": len(prompts) * MAX_TOKENS / sum(durations)}, solo)


def steps_in(steps: list[dict], began: float, ended: float) -> dict:
    """What the server's step thread did inside one burst's window."""
    inside = [s for s in steps if began <= s["began"] <= ended]
    # A step that carried a prompt chunk is a prefill step, whether or not the chunk finished its prompt.
    decode = [s["seconds"] for s in inside if decode_only(s)]
    full = [s["seconds"] for s in inside if decode_only(s) and s["decoded"] >= 28]
    return {"steps": len(inside), "prefill_step_s": sum(s["seconds"] for s in inside if s["prompt_tokens"]),
            "decode_steps": len(decode), "decode_s": sum(decode),
            "decode_step_at_32_median_s": percentile(full, 50) if full else None}


async def run_ours(prompts: list[str], reps: int, log_dir: Path, say) -> dict:
    out: dict = {}
    windows: list[tuple[int, float, float]] = []
    async with ours(MODEL, log_dir=log_dir) as server:
        await burst(STREAMLAB, server.port, prompts[:4], 4)  # warm-up
        say("ours: back-to-back (32 solo streams)")
        out["back_to_back"], solo = await back_to_back(STREAMLAB, server.port, prompts)
        say("ours: levels 1-32")
        rows = await levels(STREAMLAB, server.port, prompts, LEVELS, reps, solo,
                            lambda n, a, b: windows.append((n, a, b)))
        steps = (await server.get_json("/debug/steps"))["steps"]
        settled = await server.settle()
    out["rows"], out["levels"] = rows, by_level(rows)
    out["server_clean"] = pool_whole(settled)
    out["steps_at_32"] = [steps_in(steps, a, b) for n, a, b in windows if n == 32]
    out["solo_text"] = {i: s.text for i, s in solo.items()}
    out["solo_token_ids"] = {i: s.token_ids for i, s in solo.items()}  # the prefill section's reference too
    return out


@torch.inference_mode()
def in_process_bound(prompts: list[str], reps: int) -> dict:
    """transformers' contiguous-cache forward: one left-padded batched prefill of all 32 prompts,
    then 63 batched decode steps (greedy), no HTTP. Beside it, our engine in-process on the
    same work (one run), so the HTTP cost and the engine's cost can be told apart."""
    loaded = load_model(MODEL)
    hf = loaded.hf_model()
    ids = [loaded.tokenizer.encode(p) for p in prompts]
    pad, n = loaded.model.eos_token_id, max(map(len, ids))
    bound, engine, prefill = [], [], []
    for _ in range(reps):
        t0 = time.perf_counter()
        tokens = torch.tensor([[pad] * (n - len(p)) + p for p in ids])
        mask = (torch.arange(n)[None, :] >= torch.tensor([n - len(p) for p in ids])[:, None]).long()
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        out = hf(tokens, attention_mask=mask, position_ids=positions, use_cache=True)
        logits, past = out.logits, out.get("cache") or out.get("past_key_values")
        prefill.append(time.perf_counter() - t0)
        for _ in range(MAX_TOKENS - 1):
            nxt = logits[:, -1].argmax(-1, keepdim=True)
            mask = torch.cat([mask, torch.ones(len(ids), 1, dtype=torch.long)], 1)
            positions = positions[:, -1:] + 1
            logits, past = hf_decode_masked(hf, nxt, past, mask, positions)
        bound.append(time.perf_counter() - t0)
    # Our engine on the same work, once on this process's torch threads and once on a server's
    # (harness/machine/cores.py: one fewer than the cores, the rest left to the event loop and clients),
    # so the HTTP cost and the engine's cost can be told apart (an explanation, not a headline).
    engine.append(engine_in_process(prompts, loaded))
    with torch_threads(server_threads()):
        as_served = [engine_in_process(prompts, loaded)]
    total = len(ids) * MAX_TOKENS
    return {"bound_s": spread(bound), "bound_tokens_per_s": spread([total / t for t in bound]),
            "bound_prefill_s": spread(prefill), "padded_prompt_tokens": n * len(ids),
            "prompt_tokens": sum(map(len, ids)), "engine_s": spread(engine),
            "engine_tokens_per_s": spread([total / t for t in engine]), "torch_threads": torch.get_num_threads(),
            "server_threads": server_threads(), "engine_server_threads_s": spread(as_served),
            "engine_server_threads_tokens_per_s": spread([total / t for t in as_served])}


def engine_in_process(prompts: list[str], loaded=None) -> float:
    """Seconds our engine takes in this process for every prompt at once, MAX_TOKENS each, no HTTP."""
    return engine_steps(prompts, loaded)[0]


def engine_steps(prompts: list[str], loaded=None) -> tuple[float, list[float]]:
    """engine_in_process's seconds, and each step's that only decoded (no prompt in it)."""
    loaded = loaded or load_model(MODEL)
    ids = [loaded.tokenizer.encode(p) for p in prompts]
    eng = BatchEngine(loaded.model, EngineConfig(max_batch=32, cache=CacheConfig(1024, 16)))
    t0 = time.perf_counter()
    for i, p in enumerate(ids):
        eng.submit(str(i), p, SamplingParams(max_new_tokens=MAX_TOKENS, ignore_eos=True))
    decode_s = []
    while eng.has_work():
        began = time.perf_counter()
        out = eng.step()
        if not out.prefill_tokens and out.decoded:
            decode_s.append(time.perf_counter() - began)
    return time.perf_counter() - t0, decode_s


def hf_decode_masked(hf, nxt, past, mask, positions):
    out = hf(nxt, attention_mask=mask, position_ids=positions, use_cache=True, **{_CACHE_ARG: past})
    return out.logits, out.get(_CACHE_ARG)

