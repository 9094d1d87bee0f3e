"""The hub's books: every count and per-request record it keeps, each bounded by the engine's
`history`. The hub writes them (a close, an end, a release, a step); /stats, /metrics,
/debug/* and the harness read them."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from streamlab.engine.outputs import StepOutput
from streamlab.hub.streams import ReleaseRecord, StepRecord


class HubBooks:
    def __init__(self, history: int) -> None:
        self.releases: deque[ReleaseRecord] = deque(maxlen=history)
        self.release_delays_s: deque[float] = deque(maxlen=history)
        # Each closed stream: (request id, close reason, most events it ever had queued).
        self.closed_streams: deque[tuple[str, str, int]] = deque(maxlen=history)
        # The step thread's own record: (began, seconds, prefilled, decoded), for /debug/steps.
        self.step_log: deque[StepRecord] = deque(maxlen=history)
        # Bytes handed to clients' connections (the event loop adds; the step loop logs the change).
        self.bytes_out = 0
        self.bytes_logged = 0
        self.on_release_delay: Callable[[float], None] | None = None  # metrics hook
        self.counters = {"requests_accepted": 0, "requests_refused": 0, "late_events_dropped": 0,
                         "streams_closed": 0, "deadline_refused": 0, "streams_paused": 0, "streams_resumed": 0}
        self.cancellations: dict[str, int] = {"client_gone": 0, "slow_client": 0, "shutting_down": 0,
                                              "internal_error": 0, "resume_expired": 0, "deadline_expired": 0}

    def cancelled(self, reason: str) -> None:
        self.cancellations[reason] = self.cancellations.get(reason, 0) + 1

    def closed(self, request_id: str, reason: str, max_queued: int) -> None:
        self.closed_streams.append((request_id, reason, max_queued))
        self.counters["streams_closed"] += 1

    def record_releases(self, out: StepOutput, now: float) -> None:
        for fin in out.finished:
            closed_at, closed_after_step = fin.closed_at, fin.closed_after_step
            self.releases.append(ReleaseRecord(fin.request_id, fin.reason.value, fin.completion_tokens, fin.step,
                                               now, closed_at, closed_after_step))
            if closed_at is not None:
                delay = now - closed_at
                self.release_delays_s.append(delay)
                if self.on_release_delay is not None:
                    self.on_release_delay(delay)

    def sizes(self) -> dict[str, int]:
        return {"releases": len(self.releases), "release_delays": len(self.release_delays_s),
                "closed_streams": len(self.closed_streams), "step_log": len(self.step_log),
                "cancellation_kinds": len(self.cancellations)}
