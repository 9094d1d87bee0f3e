"""Prefill scheduling when 32 streams arrive together: chunked prefill at several step token
budgets against whole-prompt prefill in its three delivery modes.

Each configuration on its own server, the overlap section's 32 prompts and 64 greedy tokens,
`reps` bursts each. Identity: chunked streams against the overlap section's solo runs (on the
default, chunked server: a prompt's cut depends on the chunk size only, so one solo reference
serves every budget); whole-prompt streams against their own back-to-back solo runs.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace

from benchmarks.common import read_json
from benchmarks.overlap import MAX_TOKENS, MODEL, back_to_back, by_level, levels, steps_in, workload
from benchmarks.servers import ours
from benchmarks.streams import STREAMLAB, burst
from streamlab.config import EngineConfig

BUDGETS = (64, 128, 256, 512)
WHOLE = {"whole_first_token_per_prefill": [],
         "whole_first_token_per_step": ["--first-token", "step"],
         "whole_prefill_groups_of_8": ["--first-token", "step", "--max-prefills-per-step", "8"]}


async def sweep(prompts: list[str], reps: int, log_dir: Path, say) -> dict:
    chunk = EngineConfig().prefill_chunk_tokens
    out: dict = {"chunk_tokens": chunk, "default_budget": EngineConfig().step_token_budget, "configs": {}}
    overlap = read_json("overlap") or {}
    solo = {int(i): SimpleNamespace(token_ids=ids, text="") for i, ids in overlap.get("solo_token_ids", {}).items()}
    whole_solo = None

    async def measure(name: str, flags: list[str], reference) -> None:
        nonlocal whole_solo
        say(f"prefill: {name}")
        windows: list[tuple[int, float, float]] = []
        async with ours(MODEL, *flags, log_dir=log_dir) as server:
            await burst(STREAMLAB, server.port, prompts[:4], 4)
            if reference is None:  # whole prompts: their own solo runs, once
                out["whole_back_to_back"], whole_solo = await back_to_back(STREAMLAB, server.port, prompts)
                reference = whole_solo
            rows = await levels(STREAMLAB, server.port, prompts, (32,), reps, reference or None,
                                lambda n, a, b: windows.append((n, a, b)))
            steps = (await server.get_json("/debug/steps"))["steps"]
        level = by_level(rows)[0]
        level["steps"] = [steps_in(steps, a, b) for _, a, b in windows]
        level["flags"] = flags
        out["configs"][name] = level

    for budget in BUDGETS:
        await measure(f"chunked_{budget}", ["--step-token-budget", str(budget)], solo)
    for name, flags in WHOLE.items():
        await measure(name, ["--step-token-budget", "0", *flags], whole_solo)
    out["max_tokens"] = MAX_TOKENS
    return out


def run(reps: int, log_dir: Path, say) -> dict:
    return asyncio.run(sweep(workload(), reps, log_dir, say))
