"""Chunked prefill beside decode: 32 streams arriving together at several step token budgets.

Each budget on its own server (`--step-token-budget B`, the chunk size fixed), the same 32
prompts and 64 greedy tokens as the overlap section, `reps` bursts each; 0 is whole prompts
prefilled before the decode (the mode before chunking). Identity: every stream against the
same prompt alone on a chunked server (a prompt's cut depends on the chunk size only, so one
solo reference serves every budget).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from benchmarks.overlap import MAX_TOKENS, MODEL, back_to_back, by_level, levels, steps_in, workload
from benchmarks.servers import ours
from benchmarks.streams import STREAMLAB, burst
from streamlab.config import EngineConfig

BUDGETS = (0, 64, 128, 192, 256, 512)


async def sweep(prompts: list[str], reps: int, log_dir: Path, say, budgets=BUDGETS) -> dict:
    chunk = EngineConfig().prefill_chunk_tokens
    out: dict = {"chunk_tokens": chunk, "budgets": {}}
    async with ours(MODEL, "--step-token-budget", str(max(budgets)), log_dir=log_dir) as server:
        await burst(STREAMLAB, server.port, prompts[:4], 4)
        say("chunked: solo references (32 prompts alone)")
        out["back_to_back"], solo = await back_to_back(STREAMLAB, server.port, prompts)
    plain_solo = None
    for budget in budgets:
        say(f"chunked: budget {budget}")
        windows: list[tuple[int, float, float]] = []
        async with ours(MODEL, "--step-token-budget", str(budget), log_dir=log_dir) as server:
            await burst(STREAMLAB, server.port, prompts[:4], 4)
            if budget == 0:  # whole-prompt prefill has its own solo reference
                _, plain_solo = await back_to_back(STREAMLAB, server.port, prompts)
            rows = await levels(STREAMLAB, server.port, prompts, (32,), reps, plain_solo if budget == 0 else solo,
                                lambda n, a, b: windows.append((n, a, b)))
            steps = (await server.get_json("/debug/steps"))["steps"]
        level = by_level(rows)[0]
        level["steps"] = [steps_in(steps, a, b) for _, a, b in windows]
        out["budgets"][str(budget)] = level
    out["max_tokens"] = MAX_TOKENS
    return out


def run(reps: int, log_dir: Path, say) -> dict:
    return asyncio.run(sweep(workload(), reps, log_dir, say))
