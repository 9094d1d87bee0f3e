"""Request state: tokens, status, block table. A sequence never allocates anything itself."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Callable

from streamlab.sampling import SamplingParams

StopCheck = Callable[[int], bool]
"""Called with each new token id; True ends the sequence with reason `stop` in that step."""


class SequenceStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


class FinishReason(str, enum.Enum):
    LENGTH = "length"
    EOS = "eos"
    STOP = "stop"
    CANCELLED = "cancelled"
    ERROR = "error"  # the step it was in failed; its blocks went back, the engine went on


@dataclass
class Sequence:
    seq_id: int  # engine-unique; request ids may be reused after a request ends
    request_id: str
    prompt_ids: list[int]
    params: SamplingParams
    stop_check: StopCheck | None = None
    rng: Any = None  # the sampler's generator, made by sampling.make_rng
    status: SequenceStatus = SequenceStatus.WAITING
    paused: bool = False
    output_ids: list[int] = field(default_factory=list)
    block_table: list[int] = field(default_factory=list)
    finish_reason: FinishReason | None = None
    admitted_step: int | None = None
    prefilled: int = 0  # prompt tokens whose K/V are in the cache (chunked prefill)
    cached_tokens: int = 0  # of those, found in the prefix cache at admission (not computed)
    closed_at: float | None = None  # the caller's stream closed (BatchEngine.cancel), on its clock
    closed_after_step: int | None = None
    finished_step: int | None = None

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_ids) + len(self.output_ids)

    @property
    def last_token(self) -> int:
        return self.output_ids[-1] if self.output_ids else self.prompt_ids[-1]

    @property
    def max_tokens(self) -> int:
        """Tokens the sequence can ever hold: what admission reserves blocks for."""
        return len(self.prompt_ids) + self.params.max_new_tokens

    @property
    def prefill_done(self) -> bool:
        return self.prefilled >= len(self.prompt_ids)


@dataclass(frozen=True)
class Wish:
    """What another thread asked of a request, kept in the engine's inbox until the next step."""
    kind: str  # "submit" | "cancel" | "pause" | "resume" | "stop"
    request_id: str
    seq: Sequence | None = None
