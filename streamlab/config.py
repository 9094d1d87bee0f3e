"""Configuration as frozen dataclasses, checked when built. Reads no environment or argv."""

from __future__ import annotations

from dataclasses import dataclass


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
