"""The step loop, written once: the step thread drives it on the wall clock, the simulation on
virtual time (harness/sim/server.py). One engine step at a time; a prefill pass's first tokens go
out mid-step; the step's events are posted to the event loop when the clock says it ended.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import traceback
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

from streamlab.deadline import StepCostModel
from streamlab.engine.engine import BatchEngine
from streamlab.engine.outputs import StepOutput
from streamlab.hub.books import HubBooks
from streamlab.hub.step_clock import StepClock, Wait, WallStepClock
from streamlab.hub.streams import StepRecord, Stream
from streamlab.policies import BackpressureConfig, Policy

log = logging.getLogger("streamlab.hub")

IDLE_POLL_S = 0.05  # the step thread's longest sleep when idle (wishes also wake it at once)


class StepLoop:
    """Mixed into the Hub; the attributes below are the hub's, read here."""
    engine: BatchEngine
    books: HubBooks
    cfg: BackpressureConfig
    step_costs: StepCostModel
    early_first_token: bool
    step_in_flight: bool
    failure: BaseException | None
    failure_traceback: str | None
    _loop: asyncio.AbstractEventLoop | None
    _work: threading.Event
    _stopping: threading.Event
    _on_wish: Callable[[], None] | None

    _deliver: Callable[[StepOutput, float], list[Stream]]  # delivery.py
    deliver_and_wait: Callable[[StepOutput, float], Coroutine[Any, Any, None]]  # delivery.py
    end_all: Callable[[str], None]  # the hub's

    # ---- the step loop: one for the step thread and the simulation ----

    def wake_with(self, wake: Callable[[], None]) -> None:
        """For a driver of step_loop other than the step thread (the simulation): called whenever
        a wish arrives (a request, a cancel), so an idle driver steps again at once."""
        self._on_wish = wake

    @property
    def waits_for_readers(self) -> bool:
        """The naive policy: after each step the loop waits until every reader took its events."""
        return self.cfg.policy is Policy.NAIVE

    def step_loop(self, clock: "StepClock") -> Iterator[tuple[Wait, StepOutput | None, float]]:
        """The step loop, written once. It yields what its driver must wait for: IDLE (until a
        wish arrives), STEP_END (until `end` on the driver's clock) or READERS (the naive policy:
        until the readers took the step's events). The step thread blocks; the simulation awaits."""
        while not self._stopping.is_set():
            self._work.clear()
            if not self.engine.has_work():
                yield Wait.IDLE, None, 0.0
                continue
            out, end = self.run_step(clock)
            yield (Wait.READERS if self.waits_for_readers else Wait.STEP_END), out, end

    def run_step(self, clock: "StepClock") -> tuple[StepOutput, float]:
        """One engine step: first tokens handed over per prefill pass, releases noted, the step
        logged, and its events posted to the event loop at the time the clock says it ended."""
        self.step_in_flight = True
        try:
            return self._step(clock)
        finally:
            self.step_in_flight = False

    def _step(self, clock: "StepClock") -> tuple[StepOutput, float]:
        began, cpu_waited = clock.begin(), clock.cpu_waited()
        # Bytes written to clients since the last step began: work on the same cores between steps (harness.judge.timing.pace).
        bytes_before, self.books.bytes_logged = self.books.bytes_out - self.books.bytes_logged, self.books.bytes_out
        prefilled_early = prefill_tokens_early = events_early = 0

        def hand_over(part: StepOutput) -> None:  # mid-step: a prefill pass's first tokens go out now
            nonlocal prefilled_early, prefill_tokens_early, events_early
            at = clock.done(part)
            self.books.record_releases(part, at)
            prefilled_early += part.prefilled
            prefill_tokens_early += part.prefill_tokens
            events_early += len(part.tokens) + len(part.finished)
            clock.post(at, self._deliver, part, at)

        cpu0 = time.thread_time()
        out = self.engine.step(hand_over if self.early_first_token else None)
        cpu_s = time.thread_time() - cpu0
        end, cpu_waited_end = clock.end(out), clock.cpu_waited()
        self.books.record_releases(out, end)
        self.books.step_log.append(StepRecord(began, end - began, out.prefilled + prefilled_early, out.decoded,
                                        out.prefill_tokens + prefill_tokens_early,
                                        len(out.tokens) + len(out.finished) + events_early, out.decode_context,
                                        cpu_s, bytes_before, cpu_waited, cpu_waited_end))
        self.step_costs.observe(out.decoded + out.prefill_tokens + prefill_tokens_early, end - began)
        if not self.waits_for_readers:
            clock.post(end, self._deliver, out, end)
        return out, end

    def fail(self, exc: BaseException) -> None:
        """The step loop broke (either driver): keep the traceback, end every stream, refuse new ones."""
        log.error("step loop failed", exc_info=exc)
        self.failure = exc
        self.failure_traceback = "".join(traceback.format_exception(exc))
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self.end_all, "internal_error")

    def _run(self, warm_up: Callable[[], None] | None = None, warmed: threading.Event | None = None) -> None:
        """The step thread: the step loop on the wall clock."""
        assert self._loop is not None
        clock = None
        try:
            try:
                if warm_up is not None:
                    warm_up()
            finally:
                if warmed is not None:
                    warmed.set()
            clock = WallStepClock(self.clock, self._loop)
            for wait, out, end in self.step_loop(clock):
                if wait is Wait.IDLE:
                    self._work.wait(IDLE_POLL_S)
                elif wait is Wait.READERS:
                    future = asyncio.run_coroutine_threadsafe(self.deliver_and_wait(out, end), self._loop)
                    while not self._stopping.is_set():
                        try:
                            future.result(timeout=IDLE_POLL_S)
                            break
                        except TimeoutError:
                            continue
                # Wait.STEP_END: on the wall clock the step has already ended.
        except BaseException as exc:  # a broken engine must not fail silently
            self.fail(exc)
        finally:
            if clock is not None:
                clock.cpu_waited.close()
