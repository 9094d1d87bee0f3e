"""What one stream holds (its queue, its resumption buffer, its policy state) and what the step
loop records of each step and each release. The hub (streamlab/hub/hub.py) owns them all."""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass, field
from collections.abc import Callable
from typing import NamedTuple

from streamlab.detokenizer import TextStream


class StepRecord(NamedTuple):
    """One step in the step log (/debug/steps): what it did and how long it took."""
    began: float
    seconds: float
    prefilled: int  # prompts whose prefill ended in this step
    decoded: int
    prompt_tokens: int  # prompt tokens run (whole prompts, or chunks)
    events: int  # token and finish events it handed over
    decode_context: int = 0  # tokens the decoded sequences attended to, summed
    cpu_s: float = 0.0  # the step thread's CPU time in the step: no wait for the GIL or the CPU in it
    bytes_out: int = 0  # bytes the event loop handed to clients (/v1/stream's events) since the last step began
    # The step thread's run delay (step_clock.CpuWait), cumulative, when the step began and when it
    # ended: in the step, and (to the next step's start) in the gap after it.
    cpu_waited_s: float = 0.0
    cpu_waited_end_s: float = 0.0


@dataclass
class StreamEvent:
    kind: str  # "start" | "token" | "done" | "error"
    payload: dict
    id: int = 0  # the stream's own count from 1: the SSE id is "<request id>:<id>"
    size: int = 0  # payload bytes, counted only where resumption keeps the event


@dataclass
class ReleaseRecord:
    """One request's end, for /debug/releases and the harness's release checks."""
    request_id: str
    reason: str  # finish reason, or why the hub cancelled it
    completion_tokens: int
    release_step: int
    released_at: float  # hub clock, after the step that ended it
    closed_at: float | None  # when its stream was closed early (client gone, dropped), if it was
    closed_after_step: int | None  # engine steps begun at that moment: release_step should be the next


def _never() -> bool:
    return False


@dataclass
class Stream:
    request_id: str
    prompt_tokens: int
    text: TextStream
    wakeup: asyncio.Event
    taken: asyncio.Event  # set whenever the reader takes an event (the naive policy waits on it)
    queue: deque[StreamEvent] = field(default_factory=deque)
    finished: bool = False  # the last event (done or error) is queued; nothing more will be
    end_taken: bool = False  # the reader took the last event
    closed: bool = False
    close_reason: str | None = None
    paused: bool = False
    at_limit_since: float | None = None
    # The client's share of the time at the limit (policies.py): writes it held, summed, and the
    # one it holds now. A write the transport takes at once returns before anything else runs,
    # so writing_since is seen set only while the client pushes back (or while nobody reads).
    stalled_s: float = 0.0
    writing_since: float | None = None
    completion_tokens: int = 0
    max_queued: int = 0
    next_id: int = 1
    # Resumption: events already taken (bounded), which connection owns the stream, and since
    # when nobody does (the window's timer runs from then).
    sent: deque[StreamEvent] = field(default_factory=deque)
    sent_bytes: int = 0
    attachment: int = 0
    detached_since: float | None = None
    expiry: asyncio.TimerHandle | None = None
    # Whether the attached connection is gone, asked before each event is taken (the response
    # sets it from its server's scope; streamlab.guard.CONNECTION_LOST): an event taken for a
    # gone client drained the queue and resumed a paused sequence before the close cancelled it.
    connection_lost: Callable[[], bool] = field(default=_never, repr=False)

    def client_stalled_s(self, now: float) -> float:
        """The client's share of the time at the limit, up to `now` (the policy's stall timer)."""
        if self.at_limit_since is None:
            return 0.0
        holding = now - max(self.writing_since, self.at_limit_since) if self.writing_since is not None else 0.0
        return self.stalled_s + max(0.0, holding)

    def written(self, now: float) -> None:
        """The connection took the write it was handed: its time counts if the stream was at the limit."""
        self.stalled_s = self.client_stalled_s(now)
        self.writing_since = None
