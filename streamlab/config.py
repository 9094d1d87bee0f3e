"""Configuration as frozen dataclasses, checked when built. Reads no environment or argv."""

from __future__ import annotations

from dataclasses import dataclass, field

from streamlab.policies import BackpressureConfig


def _require(condition: bool, message: str) -> None:
    # Not `assert`: input checks must survive `python -O`.
    if not condition:
        raise ValueError(message)


@dataclass(frozen=True)
class CacheConfig:
    num_blocks: int = 1024
    block_size: int = 16

    def __post_init__(self) -> None:
        _require(self.num_blocks >= 1, f"num_blocks must be >= 1, got {self.num_blocks}")
        _require(self.block_size >= 1, f"block_size must be >= 1, got {self.block_size}")

    @property
    def num_slots(self) -> int:
        return self.num_blocks * self.block_size

    def blocks_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)


@dataclass(frozen=True)
class EngineConfig:
    max_batch: int = 32
    cache: CacheConfig = CacheConfig()

    def __post_init__(self) -> None:
        _require(self.max_batch >= 1, f"max_batch must be >= 1, got {self.max_batch}")


@dataclass(frozen=True)
class ServiceConfig:
    model: str = "tiny"
    engine: EngineConfig = EngineConfig()
    backpressure: BackpressureConfig = field(default_factory=BackpressureConfig)
    waiting_limit: int = 64  # requests queued for a slot before new ones get 429
    max_tokens_budget: int = 1024  # prompt tokens + max_new_tokens, per request
    keepalive_s: float = 15.0
    graceful_timeout_s: float = 5.0
    lab: bool = False  # padding and the write-only response, for measurements only
    max_body_bytes: int = 64 * 1024
    max_pad_bytes: int = 1024 * 1024

    def __post_init__(self) -> None:
        _require(self.waiting_limit >= 1, f"waiting_limit must be >= 1, got {self.waiting_limit}")
        _require(self.max_tokens_budget >= 2, f"max_tokens_budget must be >= 2, got {self.max_tokens_budget}")
        _require(self.keepalive_s > 0, f"keepalive must be > 0 s, got {self.keepalive_s}")
        _require(self.graceful_timeout_s >= 0, f"graceful timeout must be >= 0 s, got {self.graceful_timeout_s}")
