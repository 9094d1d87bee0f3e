"""The Hub: the sole caller of engine.step() in the service; per-stream queues; one close.

    event loop thread                      step thread
    -----------------                      -----------
    open() -> engine.submit ------------>  engine.step()
    events() <- queue <- _deliver  <-----  call_soon_threadsafe(_deliver, step output)
    close() -> engine.cancel (a wish)      (naive: waits until each stream took its events)

Every way a stream ends (finished, client gone, dropped as slow, shut down, error) calls
close(), which is idempotent and never waits. The engine never waits for a client, except
under the `naive` policy, kept as the negative control that shows head-of-line blocking.

This module owns the map of open streams and every change to it: admission, resumption's
attach and leave, the one close, the server's life cycle and what it reports. The other jobs
are the hub's parts, each in its own module and mixed in: delivery.py (a step's output into
events, events out in order), backpressure.py (a policy's actions), step_loop.py (the step loop
for both drivers). What a stream holds is streams.py's, the books books.py's, resumption
resumption.py's and a step's clock step_clock.py's.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import threading
import time
from collections.abc import Callable

from streamlab.config import ResumeConfig
from streamlab.deadline import StepCostModel, predict_ttft_s
from streamlab.detokenizer import TextStream, token_byte_table
from streamlab.engine.engine import BatchEngine
from streamlab.errors import DeadlineUnmeetable, Overloaded, ShuttingDown
from streamlab.hub.backpressure import Backpressure
from streamlab.hub.books import HubBooks
from streamlab.hub.delivery import Delivery
from streamlab.hub.resumption import Resumption
from streamlab.hub.step_clock import Clock
from streamlab.hub.step_loop import StepLoop, log
from streamlab.hub.streams import Stream, StreamEvent
from streamlab.policies import BackpressureConfig, Policy, admits
from streamlab.sampling import SamplingParams

WARM_UP_DEADLINE_S = 120.0  # start() waits this long for the step thread's warm-up


class Hub(Delivery, Backpressure, StepLoop):
    def __init__(self, engine: BatchEngine, tokenizer, backpressure_cfg: BackpressureConfig = BackpressureConfig(),
                 waiting_limit: int = 64, clock: Clock = time.monotonic, first_token: str = "prefill",
                 resume: ResumeConfig = ResumeConfig(), admission: str = "waiting-limit",
                 defect: str = "") -> None:
        self.engine = engine
        self.defect = defect  # lab only: a seeded defect (streamlab/defects.py), "" in every real run
        self.admission = admission  # "waiting-limit", or "deadline": requests with a deadline pass the gate
        self.step_costs = StepCostModel()  # fed by every step, read by the deadline gate
        self.resume = resume
        self.resumption = Resumption(resume, engine.config.history)
        # The naive policy waits for readers after each step; it keeps per-step delivery.
        self.early_first_token = first_token == "prefill" and backpressure_cfg.policy is not Policy.NAIVE
        self.cfg = backpressure_cfg
        self.waiting_limit = waiting_limit
        self.clock = clock
        self._token_bytes = token_byte_table(tokenizer, engine.model.shape.vocab_size)
        self._streams: dict[str, Stream] = {}
        self._ids = itertools.count(1)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._work = threading.Event()
        self._stopping = threading.Event()
        self._ticker: asyncio.Task | None = None
        self.books = HubBooks(engine.config.history)  # every count and record it keeps, bounded
        self._on_wish: Callable[[], None] | None = None  # an external driver's wake-up (wake_with)
        self.draining = False
        # True from a step's start until its releases are in the books: the engine frees a
        # sequence mid-step, so /stats could read idle before the release record exists.
        self.step_in_flight = False
        self.failure: BaseException | None = None
        self.failure_traceback: str | None = None

    # ---- life cycle (owned by the app's lifespan) ----

    def start(self, threaded: bool = True, warm_up: Callable[[], None] | None = None) -> None:
        """threaded=False: no step thread; a driver (the simulation) runs step_loop() itself.
        warm_up runs first, on the thread that will run the steps, and start() returns after it:
        torch's per-thread set-up (its OpenMP team, say) is paid there, not by the first client."""
        self._loop = asyncio.get_running_loop()
        if threaded:
            warmed = threading.Event()
            self._thread = threading.Thread(target=self._run, args=(warm_up, warmed), name="streamlab-step-loop",
                                            daemon=True)
            self._thread.start()
            warmed.wait(WARM_UP_DEADLINE_S)
        elif warm_up is not None:
            warm_up()
        if self.cfg.policy in (Policy.DROP, Policy.PAUSE_THEN_DROP):
            self._ticker = self._loop.create_task(self._stall_ticker())

    async def stop(self, timeout_s: float = 10.0) -> list[str]:
        """End every stream, stop the step thread, drain the engine; return broken invariants."""
        self.end_all("shutting_down")
        if self._ticker:
            self._ticker.cancel()
        self._stopping.set()
        self._wake()
        if self._thread:
            await asyncio.to_thread(self._thread.join, timeout_s)
        problems: list[str] = []
        for rid in self.engine.live_request_ids():
            self.engine.cancel(rid)
        try:
            for _ in range(10_000):
                if not self.engine.has_work():
                    break
                out = self.engine.step()
                self.books.record_releases(out, self.clock())
        except Exception as exc:  # a broken engine: report it, do not hide the books behind a traceback
            problems.append(f"final drain failed: {type(exc).__name__}: {exc}")
        problems += self.engine.check_invariants() + self.engine.check_released()
        if problems:
            log.error("engine not clean at shutdown: %s", problems)
        return problems

    def begin_shutdown(self, grace_s: float) -> None:
        """Stop admitting now; end whatever still runs after `grace_s` with `shutting_down`."""
        if self.draining:
            return
        self.draining = True
        assert self._loop is not None
        self._loop.call_soon_threadsafe(self._loop.call_later, grace_s, self.end_all, "shutting_down")

    # ---- streams (event loop thread) ----

    def open(self, prompt_ids: list[int], params: SamplingParams, stops: list[str],
             ttft_deadline_s: float | None = None) -> Stream:
        """Admit a request to the engine or raise a RequestError; nothing is sent yet.

        Admission: under `deadline`, a request with a first-token deadline is refused when its
        predicted first-token time is past it, and dropped with an error event if the deadline
        passes while it still waits for a slot; one without a deadline (and every request under
        `waiting-limit`) is refused when the waiting limit is reached."""
        if self.failure is not None:
            raise ShuttingDown("the engine failed and this server takes no new work; see /healthz")
        if self.draining:
            raise ShuttingDown("the server is shutting down")
        gated = self.admission == "deadline" and ttft_deadline_s is not None
        if gated and self.step_costs.measured():  # unmeasured: admitted, and dropped if it waits past the deadline
            predicted = predict_ttft_s(self.engine.queue_snapshot(), len(prompt_ids), self.step_costs)
            if predicted > ttft_deadline_s:
                self.books.counters["deadline_refused"] += 1
                raise DeadlineUnmeetable(
                    f"the first token is predicted in {predicted * 1e3:.0f} ms, past the deadline of "
                    f"{ttft_deadline_s * 1e3:.0f} ms; retry later", max(1, math.ceil(predicted - ttft_deadline_s)))
        elif not admits(self.engine.stats().waiting, self.waiting_limit):
            raise Overloaded(f"{self.waiting_limit} requests are already waiting for a slot; retry later")
        rid = f"req-{next(self._ids)}"
        text = TextStream(self._token_bytes, stops[:1] if self.defect == "first_stop_only" else stops,
                          across_tokens=self.defect != "stop_across_tokens",
                          tail_after_stop=self.defect == "stop_tail_after_stop")
        stream = Stream(rid, len(prompt_ids), text, asyncio.Event(), asyncio.Event())
        self.engine.submit(rid, prompt_ids, params, stop_check=text)
        self._push(stream, "start", {"id": rid, "prompt_tokens": len(prompt_ids)})
        self._streams[rid] = stream
        self.books.counters["requests_accepted"] += 1
        if gated:
            assert self._loop is not None
            self._loop.call_later(ttft_deadline_s, self._deadline_passed, stream)
        self._wake()
        return stream

    def _deadline_passed(self, stream: Stream) -> None:
        """A gated request still waiting for a slot at its deadline is dropped (it holds no blocks)."""
        if not stream.finished and not stream.closed and self.engine.is_waiting(stream.request_id):
            self._end_with_error(stream, "deadline_expired",
                                 "the first-token deadline passed while the request waited for a slot")

    # ---- resumption (event loop thread) ----

    def attach(self, last_event_id: str) -> tuple[Stream, list[StreamEvent]]:
        """A reconnect with Last-Event-ID "<request id>:<n>": the stream and the events after n that
        were already taken; its own queue follows. Refused (a RequestError) before the first byte."""
        stream, replay = self.resumption.find(self._streams, last_event_id, self.clock())
        stream.attachment += 1  # a connection still attached stops at its next event
        self.books.counters["streams_resumed"] += 1
        stream.detached_since = None
        stream.written(self.clock())  # the old connection's write no longer counts against the client
        if stream.expiry is not None:
            stream.expiry.cancel()
            stream.expiry = None
        stream.wakeup.set()
        return stream, replay

    def leave(self, stream: Stream, attachment: int, resumable: bool) -> None:
        """A response ended without its last event read. With resumption on (and a resumable
        route), the stream waits for a reconnect for the window; otherwise it is closed now."""
        if stream.closed or stream.attachment != attachment:
            return  # already closed, or another connection took over
        if not (resumable and self.resume.on) or self.draining:
            self.close(stream, "shutting_down" if self.draining else "client_gone")
            return
        stream.detached_since = self.clock()
        stream.writing_since = stream.writing_since or stream.detached_since  # nobody takes its events now
        assert self._loop is not None
        stream.expiry = self._loop.call_later(self.resume.window_s, self._expire, stream, attachment)

    def _expire(self, stream: Stream, attachment: int) -> None:
        if stream.attachment == attachment and stream.detached_since is not None:
            self.close(stream, "resume_expired")

    def close(self, stream: Stream, reason: str) -> None:
        """Idempotent, never waits: cancel the sequence if it still runs, unregister the stream."""
        if stream.closed:
            if stream.end_taken:  # a replay of a completed stream ended: its window counts from now
                self.resumption.replayed(stream, self.clock())
            return
        stream.closed = True
        stream.close_reason = reason
        if stream.expiry is not None:
            stream.expiry.cancel()
            stream.expiry = None
        self.resumption.ended(stream, reason, self.clock())
        kept = self.defect == "paused_leaver_kept" and stream.paused and reason == "client_gone"  # lab only
        if not stream.finished and not kept:
            self.engine.cancel(stream.request_id, closed_at=self.clock())
            self.books.cancelled(reason)
            self._wake()
        self._streams.pop(stream.request_id, None)
        self.books.closed(stream.request_id, reason, stream.max_queued)
        stream.wakeup.set()
        stream.taken.set()

    def end_all(self, reason: str) -> None:
        """End every unfinished stream with an error event of type `reason` (shutdown, failure)."""
        for stream in list(self._streams.values()):
            if not stream.finished:
                self._end_with_error(stream, reason, f"stream ended: {reason}")

    def _end_with_error(self, stream: Stream, error_type: str, message: str) -> None:
        self.engine.cancel(stream.request_id, closed_at=self.clock())
        self.books.cancelled(error_type)
        self._push(stream, "error", {"error": {"type": error_type, "message": message}})
        stream.finished = True
        stream.wakeup.set()
        self._wake()

    def _wake(self) -> None:
        self._work.set()
        if self._on_wish is not None:
            self._on_wish()

    # ---- inspection ----

    def sizes(self) -> dict[str, int]:
        """Every per-stream collection the hub and engine keep (a soak samples them)."""
        return {"streams": len(self._streams), "ended_remembered": len(self.resumption.ended_streams),
                "completed_kept": len(self.resumption.completed),
                **self.books.sizes(), **self.engine.sizes()}

    def stats(self) -> dict:
        engine = self.engine.stats()
        step_in_flight = self.step_in_flight  # read after the engine's counts (streamlab.idle.drained)
        return {
            "step_in_flight": step_in_flight,
            "blocks_total": engine.blocks_total, "blocks_free": engine.blocks_free,
            "blocks_reserved": engine.blocks_reserved, "blocks_cached": engine.blocks_cached,
            "blocks_evictable": engine.blocks_evictable, "prefix_hit_blocks": engine.prefix_hit_blocks,
            "prefix_queried_blocks": engine.prefix_queried_blocks, "prefix_evictions": engine.prefix_evictions,
            "waiting": engine.waiting, "running": engine.running,
            "paused": engine.paused, "streams_registered": len(self._streams),
            "streams_detached": sum(1 for st in self._streams.values() if st.detached_since is not None),
            "releases": engine.releases,
            "double_release_attempts": engine.double_release_attempts, "steps": engine.steps,
            "tokens_generated": engine.tokens_generated, "finished_by_reason": engine.finished_by_reason,
            "cancelled_while": engine.cancelled_while,
            "cancellations": dict(self.books.cancellations), "policy": self.cfg.policy.value,
            "draining": self.draining, "healthy": self.failure is None,
            "engine_step_errors": self.engine.step_errors, "last_engine_error": self.engine.last_step_error,
            "failure": self.failure_traceback, **self.books.counters,
        }
