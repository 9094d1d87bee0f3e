"""Where the step loop's times come from, and what it waits for between steps: the wall clock
(the step thread) or a cost model (the simulation's SimStepClock drives the same loop)."""

from __future__ import annotations

import asyncio
import os
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
    def cpu_waited(self) -> float: ...  # the step thread's time so far ready to run but not running


SCHEDSTAT = "/proc/thread-self/schedstat"  # time on a CPU, time ready but waiting for one (ns), timeslices


class CpuWait:
    """The calling thread's run delay: time it was ready to run but not running. It is what a CPU
    quota's throttling (a container's limit, `scripts/dev slow`) and other work on the same cores
    add to a step's period without the step loop waiting for anything: the harness subtracts it
    where it asks whether the loop was busy (harness.judge.timing.step_pace). Opened by the thread it
    reads (thread-self is resolved when opened); 0 where the kernel does not keep it."""

    def __init__(self) -> None:
        self._fd: int | None = None
        self._absent = False

    def __call__(self) -> float:
        if self._absent:
            return 0.0
        try:
            if self._fd is None:
                self._fd = os.open(SCHEDSTAT, os.O_RDONLY)
            return int(os.pread(self._fd, 100, 0).split()[1]) / 1e9
        except (OSError, IndexError, ValueError):
            self.close()
            self._absent = True
            return 0.0

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class WallStepClock:
    """The step thread's clock: a part is done when it is done; events go to the loop at once."""

    def __init__(self, clock: Clock, loop: asyncio.AbstractEventLoop) -> None:
        self.clock, self.loop = clock, loop
        self.cpu_waited = CpuWait()

    def begin(self) -> float:
        return self.clock()

    def done(self, part: StepOutput) -> float:
        return self.clock()

    end = done

    def post(self, at: float, fn: Callable, *args) -> None:
        self.loop.call_soon_threadsafe(fn, *args)
