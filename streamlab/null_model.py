"""The `null` preset: a lab model that makes tokens at almost no cost, so that a run measures the
harness and the service around the engine (the hub, the cache's books, the policies, the checks),
not matrix products. The engine drives it exactly as it drives GPT2: it is admitted, holds and
releases blocks, pauses and is cancelled; only the forward pass is replaced.

Its next token is a fixed function of the last token and its position (never end-of-sequence, so
a stream runs to its max_new_tokens), the same alone or in any batch, so identity holds. It hands
the engine chosen token ids, not logits (streamlab.sampling.sample takes a 0-d row as the token),
so sampling options change nothing. `step_s` paces it: every forward pass then takes at least that
long (a sleep, the GIL released), a stand-in for a real engine's step time when the point is how
many streams the harness and the service can carry at a realistic token rate.
"""

from __future__ import annotations

import time

import torch

from streamlab.config import CacheConfig
from streamlab.engine.cache import KVCache
from streamlab.presets import GPT2Shape


class NullModel:
    def __init__(self, shape: GPT2Shape, eos_token_id: int | None, step_s: float = 0.0) -> None:
        self.shape = shape
        self.eos_token_id = eos_token_id
        self.dtype = torch.float32
        self.step_s = step_s
        self.row_quantum = 1

    def cast(self, dtype: torch.dtype) -> "NullModel":
        return self  # no weights to cast

    def new_cache(self, config: CacheConfig) -> KVCache:
        return KVCache(1, 1, 1, config)  # the block books are real; the tensors need no width

    def _next(self, last: torch.Tensor, position: torch.Tensor) -> torch.Tensor:
        """The next token of each row: a fixed function of its last token and position, never eos."""
        vocab = self.shape.vocab_size
        token = (last * 31 + position * 7 + 1) % (vocab - 1)
        if self.eos_token_id is not None:
            token = token + (token >= self.eos_token_id).long()  # skip eos: streams run to their length
        return token

    def _pace(self, started: float) -> None:
        if self.step_s:
            time.sleep(max(0.0, self.step_s - (time.perf_counter() - started)))

    def prefill_many(self, prompts: list[list[int]], slots: list[torch.Tensor], cache: KVCache) -> torch.Tensor:
        started = time.perf_counter()
        out = self._next(torch.tensor([p[-1] for p in prompts]), torch.tensor([len(p) for p in prompts]))
        self._pace(started)
        return out

    def decode(self, batch, cache: KVCache) -> torch.Tensor:
        return self.step_forward(batch, [], cache)

    def step_forward(self, batch, chunks: list, cache: KVCache) -> torch.Tensor:
        started = time.perf_counter()
        rows = []
        if batch is not None:
            rows.append(self._next(batch.token_ids, batch.positions + 1))
        ends = [c for c in chunks if c.wants_logits]
        if ends:
            rows.append(self._next(torch.stack([c.token_ids[-1] for c in ends]),
                                   torch.tensor([c.start + c.token_ids.shape[0] for c in ends])))
        self._pace(started)
        return torch.cat(rows) if rows else torch.empty(0, dtype=torch.long)
