"""Lab only: the engine faults a run can ask for (an exception inside a step, a slower step)."""

from __future__ import annotations

import random
import time
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class FaultPlan:
    """Lab only: make the model raise inside step `at_step`, and/or in any step with probability
    `rate` (a generator seeded with `seed`, so a run is repeatable); make every step busy for
    (step_slowdown - 1) x its own CPU time more (a slower engine, for the timing gates); `defect`:
    one of the engine's seeded defects (streamlab/defects.py)."""
    at_step: int = 0
    rate: float = 0.0
    seed: int = 0
    step_slowdown: float = 1.0
    defect: str = ""  # a seeded defect inside the engine (streamlab/defects.py)

    def rng(self) -> random.Random:
        return random.Random(self.seed)


def busy(cpu_s: float) -> None:
    """The lab's slower engine: this thread's CPU busy for cpu_s more, in torch as a step is
    (the GIL released inside each product, as in a real step), so it costs what slower code would."""
    a = torch.ones(32, 32)
    until = time.thread_time() + cpu_s
    while time.thread_time() < until:
        torch.mm(a, a)
