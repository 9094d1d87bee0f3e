"""Who pays for a slow reader, and who gets in: pure decisions, no I/O.

  naive            the step loop waits for each stream to take its event (everyone pays)
  unbounded        queue without limit (memory pays)
  pause            a stream at the queue limit leaves the decode batch (its own blocks and slot pay)
  drop             a stream whose client holds it at the limit for the stall timeout is cancelled (it pays)
  pause_then_drop  pause at the limit; cancel if its client still holds it there after the stall timeout

A stream is blamed only for its own client. Its stall clock runs while it is at the limit and its
connection holds a write the client has not taken; not while its writer merely waits its turn on
the server's event loop (busy with other writes, or waiting for the GIL): that lag is the server's.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Policy(str, enum.Enum):
    NAIVE = "naive"
    UNBOUNDED = "unbounded"
    PAUSE = "pause"
    DROP = "drop"
    PAUSE_THEN_DROP = "pause_then_drop"


class Action(enum.Enum):
    NONE = "none"
    PAUSE = "pause"
    RESUME = "resume"
    DROP = "drop"


@dataclass(frozen=True)
class BackpressureConfig:
    policy: Policy = Policy.PAUSE
    queue_limit: int = 8
    stall_timeout_s: float = 0.25

    def __post_init__(self) -> None:
        if self.queue_limit < 1:
            raise ValueError(f"queue_limit must be >= 1, got {self.queue_limit}")
        if self.stall_timeout_s <= 0:
            raise ValueError(f"stall_timeout_s must be > 0, got {self.stall_timeout_s}")


@dataclass(frozen=True)
class Decision:
    action: Action
    at_limit_since: float | None  # when the queue reached the limit, carried between calls


def backpressure(cfg: BackpressureConfig, queued: int, paused: bool, at_limit_since: float | None,
                 now: float, client_stalled_s: float) -> Decision:
    """What to do with a stream that has `queued` events its reader has not taken. `client_stalled_s`:
    of its time at the limit, how long its client held a write without taking it."""
    at_limit = queued >= cfg.queue_limit
    since = (now if at_limit_since is None else at_limit_since) if at_limit else None
    if cfg.policy in (Policy.NAIVE, Policy.UNBOUNDED):
        return Decision(Action.NONE, since)
    stalled = since is not None and client_stalled_s > cfg.stall_timeout_s
    if stalled and cfg.policy in (Policy.DROP, Policy.PAUSE_THEN_DROP):
        return Decision(Action.DROP, since)
    if cfg.policy in (Policy.PAUSE, Policy.PAUSE_THEN_DROP):
        if at_limit and not paused:
            return Decision(Action.PAUSE, since)
        if not at_limit and paused:
            return Decision(Action.RESUME, since)
    return Decision(Action.NONE, since)


def admits(waiting: int, waiting_limit: int) -> bool:
    """The waiting limit: a count of requests queued for a slot (not a bound on latency)."""
    return waiting < waiting_limit
