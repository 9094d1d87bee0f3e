"""Joiners: the first token of requests that arrive while 8 or 24 streams run (the chapter's H3).

Long streams start together; once every one has its first token, twelve 8-token requests
arrive at random moments over two seconds. Idle: the same twelve, each alone. Against: the same requests on an idle engine, and
one decode step at that load plus one admitting step, from the server's own step log.
"""

from __future__ import annotations

import asyncio
import random
import time
from pathlib import Path

from benchmarks.common import spread
from harness.machine.cost_model import decode_only
from harness.record.trace import percentile
from benchmarks.servers import ours
from benchmarks.streams import STREAMLAB, timed_stream
from streamlab.prompts import prompts_near

MODEL = "gpt2-small-random"
JOINERS = 12
WINDOW_S = 2.0
LONG_TOKENS = 64
JOINER_TOKENS = 8


async def _condition(port: int, running: int, prompts: list[str], rng: random.Random) -> tuple[list[float], int]:
    """TTFTs of the joiners, and how many long streams were still running when the last joined."""
    starts = [asyncio.Event() for _ in range(running)]
    long = [asyncio.ensure_future(timed_stream(STREAMLAB, port, i, prompts[i % len(prompts)], LONG_TOKENS, starts[i]))
            for i in range(running)]
    # Every long stream has its first token (all prefills done) before anyone joins.
    await asyncio.wait_for(asyncio.gather(*(e.wait() for e in starts)), 120)
    if not running:  # the idle engine: each request alone
        return [(await timed_stream(STREAMLAB, port, 100 + k, prompts[(k + 7) % len(prompts)], JOINER_TOKENS)).ttft_s
                for k in range(JOINERS)], 0
    began = time.monotonic()
    offsets = sorted(rng.uniform(0, WINDOW_S) for _ in range(JOINERS))

    async def joiner(k: int, at: float):
        await asyncio.sleep(max(0.0, began + at - time.monotonic()))
        return await timed_stream(STREAMLAB, port, 100 + k, prompts[(k + 7) % len(prompts)], JOINER_TOKENS)

    joined = await asyncio.gather(*(joiner(k, at) for k, at in enumerate(offsets)))
    still_running = sum(not t.done() for t in long)
    await asyncio.gather(*long)
    return [s.ttft_s for s in joined], still_running


async def run(log_dir: Path, say, repetitions: int = 1) -> dict:
    prompts = prompts_near(200, 32)
    rng = random.Random(27)
    out = {"model": MODEL, "joiners": JOINERS, "window_s": WINDOW_S, "conditions": []}
    async with ours(MODEL, log_dir=log_dir) as server:
        await timed_stream(STREAMLAB, server.port, 0, prompts[0], 4)
        for running in (0, 8, 24):
            say(f"joiners: {running} running")
            ttfts, overlapped = [], []
            for _ in range(repetitions):
                began = time.monotonic()
                t, still = await _condition(server.port, running, prompts, rng)
                ttfts += t
                overlapped.append(still)
                ended = time.monotonic()
            steps = [s for s in (await server.get_json("/debug/steps"))["steps"] if began <= s["began"] <= ended]
            # A step that carried a prompt chunk admits, whether or not the chunk finished its prompt.
            decode = [s["seconds"] for s in steps if decode_only(s) and s["decoded"] >= max(1, running)]
            admit = [s["seconds"] for s in steps if s["prompt_tokens"]]
            bound = (percentile(decode, 50) if decode else 0.0) + (percentile(admit, 50) if admit else 0.0)
            out["conditions"].append({"running": running, "ttft_p50_s": percentile(ttfts, 50), "ttft_p99_s": percentile(ttfts, 99),
                                      "ttft_s": spread(ttfts), "decode_step_p50_s": percentile(decode, 50) if decode else None,
                                      "admitting_step_p50_s": percentile(admit, 50) if admit else None,
                                      "step_plus_prefill_s": bound, "long_streams_still_running": min(overlapped)})
    idle = out["conditions"][0]["ttft_p50_s"]
    for c in out["conditions"]:
        c["ttft_p50_vs_idle"] = c["ttft_p50_s"] / idle
        c["ttft_p50_vs_step_plus_prefill"] = c["ttft_p50_s"] / c["step_plus_prefill_s"] if c["step_plus_prefill_s"] else None
    return out
