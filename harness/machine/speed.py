"""This machine's speed now, by a yardstick that runs none of our engine's code.

The yardstick is transformers' own GPT-2 forward pass (`GPT2LMHeadModel` with its own
contiguous KV cache, the same weights) at the shapes of decode steps, with the torch threads a
live server gets (harness/machine/cores.py). A profile stores what the yardstick took when its engine
terms were measured (`reference_s`), so now/then says how much slower or faster this machine
is than the one that made the profile, and the engine's real step times can be judged on this
machine: a slower machine slows both, a slower engine only ours. A slowdown written into our
engine's code is also in any profile fitted this session, which is why the yardstick must not
run it.

Each shape is timed as the median of single steps in this thread's CPU time, as the engine's
steps are (the hub records each step's thread CPU time): CPU time leaves out what wall time adds
on a busy machine (waiting for the GIL while the event loop writes, another process on the core,
a CPU quota's throttling pauses), which moved one live scenario's median step 1.0-2.0x from run
to run in wall time. It is timed in a tight loop right after a run's steps:
timed one step at a time between them, its reading moved 1.1-1.6x from run to run of one
scenario (its code and weights cold each time), where the tight loop's moved within 10%.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass
from functools import lru_cache

from harness.machine.cores import server_threads, torch_threads
from streamlab.bench_step import SPEED_BATCHES, SPEED_PROMPT_TOKENS, SPEED_STEPS, SPEED_WARMUP

# The shapes and bursts the drift check pairs with the engine (streamlab.bench_step.engine_speed):
# a profile's reference_s must be read the same way.
BATCHES, STEPS, WARMUP, PROMPT_TOKENS = SPEED_BATCHES, SPEED_STEPS, SPEED_WARMUP, SPEED_PROMPT_TOKENS
REPEATS = 9  # bursts per shape, the median of their medians: at 5 one reading in a few moved 15%


@dataclass(frozen=True)
class Reading:
    """The yardstick's decode step at each batch size (seconds), and one figure for them."""
    model: str
    decode_s: dict[int, float]

    @property
    def step_s(self) -> float:
        """The geometric mean over the shapes: one slower shape moves it by its share."""
        return math.exp(statistics.fmean(math.log(v) for v in self.decode_s.values()))

    def as_dict(self) -> dict:
        return {"decode_s": {str(b): round(v, 8) for b, v in self.decode_s.items()}, "step_s": round(self.step_s, 8)}


@lru_cache(maxsize=4)
def _yardstick(model: str):
    from streamlab.bench_step import fixed_length_prompts
    from streamlab.models import load_model

    loaded = load_model(model)
    return loaded.hf_model(), fixed_length_prompts(loaded, max(BATCHES), PROMPT_TOKENS)


def measure(model: str, repeats: int = REPEATS) -> Reading:
    """Time the yardstick now (about 0.1 s for tiny), interleaving the shapes."""
    from streamlab.bench_step import contiguous_step_ms
    from streamlab.quiet_gc import quiet_collector

    hf, prompts = _yardstick(model)
    samples: dict[int, list[float]] = {b: [] for b in BATCHES}
    with torch_threads(server_threads()), quiet_collector():
        contiguous_step_ms(hf, prompts[:1], 4, 2, clock=time.thread_time)  # warm-up, not kept
        for _ in range(repeats):
            for b in BATCHES:
                samples[b].append(statistics.median(contiguous_step_ms(hf, prompts[:b], STEPS, WARMUP,
                                                                       clock=time.thread_time)) / 1e3)
    return Reading(model, {b: statistics.median(v) for b, v in samples.items()})
