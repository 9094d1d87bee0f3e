"""What the engine hands back: each step's events, a request's end, and its counters."""

from __future__ import annotations

from dataclasses import dataclass, field

from streamlab.engine.sequence import FinishReason


@dataclass(frozen=True)
class TokenEvent:
    request_id: str
    index: int  # 0 for the first generated token
    token_id: int


@dataclass(frozen=True)
class FinishEvent:
    request_id: str
    reason: FinishReason
    completion_tokens: int
    step: int  # the step in which the sequence ended (and its blocks, if any, went back)
    closed_at: float | None = None  # cancel(closed_at=): when its client's stream was closed, on the caller's clock
    closed_after_step: int | None = None  # steps begun at that moment: `step` should be the next


@dataclass(frozen=True)
class StepOutput:
    step: int
    tokens: list[TokenEvent]
    finished: list[FinishEvent]
    prefilled: int
    decoded: int
    prefill_tokens: int = 0  # prompt tokens run through prefill in this step
    decode_context: int = 0  # tokens the decoded sequences attended to, summed (a decode's cost grows with it)
    error: str | None = None  # the step failed: its sequences ended with reason `error`


@dataclass(frozen=True)
class EngineStats:
    blocks_total: int
    blocks_free: int
    blocks_reserved: int
    waiting: int
    running: int
    paused: int
    releases: int
    double_release_attempts: int
    steps: int
    tokens_generated: int
    requests_submitted: int
    requests_finished: int
    finished_by_reason: dict[str, int] = field(default_factory=dict)
    cancelled_while: dict[str, int] = field(default_factory=dict)  # waiting, running, paused
    # The prefix cache (0 with it off): blocks holding indexed prompt content, owned or not; of
    # those, owned by no sequence (free to evict: a drained server holds free + evictable blocks).
    blocks_cached: int = 0
    blocks_evictable: int = 0
    prefix_hit_blocks: int = 0
    prefix_queried_blocks: int = 0
    prefix_evictions: int = 0
