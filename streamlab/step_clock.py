"""Where the step loop's times come from, and what it waits for between steps: the wall clock
(the step thread) or a cost model (the simulation's SimStepClock drives the same loop)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from enum import Enum
from typing import Protocol

from streamlab.engine.outputs import StepOutput

Clock = Callable[[], float]


class Wait(Enum):
    IDLE = "idle"
    STEP_END = "step_end"
    READERS = "readers"


class StepClock(Protocol):
    """Where a step's times come from: the wall clock (the step thread) or a cost model (the simulation)."""

    def begin(self) -> float: ...  # a step begins now: its start time
    def done(self, part: StepOutput) -> float: ...  # a prefill pass handed over its first tokens: its time
    def end(self, out: StepOutput) -> float: ...  # the step's rest is done: its end time
    def post(self, at: float, fn: Callable, *args) -> None: ...  # run fn(*args) on the event loop at `at`


class WallStepClock:
    """The step thread's clock: a part is done when it is done; events go to the loop at once."""

    def __init__(self, clock: Clock, loop: asyncio.AbstractEventLoop) -> None:
        self.clock, self.loop = clock, loop

    def begin(self) -> float:
        return self.clock()

    def done(self, part: StepOutput) -> float:
        return self.clock()

    end = done

    def post(self, at: float, fn: Callable, *args) -> None:
        self.loop.call_soon_threadsafe(fn, *args)
