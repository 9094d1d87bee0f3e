"""SamplingParams and a pure sample(logits, params, rng). No model here.

Each request carries its own seeded generator and is sampled from its own logits row, so
a sampled request gives the same tokens alone or in a batch (given equal logits, which
the model guarantees by construction; see model.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


SAMPLING_FIELDS = ("max_new_tokens", "temperature", "top_k", "top_p", "seed", "ignore_eos")


@dataclass(frozen=True)
class SamplingParams:
    max_new_tokens: int = 16
    temperature: float = 0.0  # 0 means greedy
    top_k: int = 0  # 0 means off
    top_p: float = 1.0
    seed: int | None = None
    ignore_eos: bool = False

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0, got {self.top_k}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")

    @classmethod
    def of(cls, request, **given) -> "SamplingParams":
        """The one mapping from a request to its sampling: any object with these fields as
        attributes (our routes' and OpenAI's request models) or keys (the harness's planned
        requests); `given` overrides (OpenAI's routes work out max_new_tokens themselves). A
        field the request leaves None keeps the default."""
        read = request.get if isinstance(request, dict) else lambda name: getattr(request, name, None)
        values = {name: read(name) for name in SAMPLING_FIELDS if name not in given}
        return cls(**{k: v for k, v in values.items() if v is not None}, **given)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


def make_rng(params: SamplingParams) -> torch.Generator | None:
    if params.greedy:
        return None
    rng = torch.Generator()
    rng.manual_seed(params.seed if params.seed is not None else torch.seed())
    return rng


def logits_to_probs(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    # logits: (V,)
    logits = logits / params.temperature
    if params.top_k:
        kth = torch.topk(logits, min(params.top_k, logits.numel())).values[-1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    if params.top_p < 1.0:
        sorted_probs, order = torch.sort(probs, descending=True)
        # Keep the smallest prefix whose mass reaches top_p (always at least one token).
        outside = torch.cumsum(sorted_probs, dim=-1) - sorted_probs >= params.top_p
        sorted_probs = sorted_probs.masked_fill(outside, 0.0)
        probs = torch.zeros_like(probs).scatter_(0, order, sorted_probs)
        probs = probs / probs.sum()
    return probs


def sample(logits: torch.Tensor, params: SamplingParams, rng: torch.Generator | None) -> int:
    """One token id from one row of logits (V,); a 0-d row is a token the model chose itself
    (streamlab.null_model), taken as it is."""
    if logits.dim() == 0:
        return int(logits)
    if params.greedy:
        return int(torch.argmax(logits))
    probs = logits_to_probs(logits.float(), params)
    return int(torch.multinomial(probs, 1, generator=rng))


def sample_rows(logits: torch.Tensor, params: list[SamplingParams], rngs: list[torch.Generator | None],
                start: int = 0) -> list[int]:
    """One token id per row of logits[start:start + len(params)]: the greedy rows by one argmax
    over the batch (one call, not one per row; the same ids, as an argmax row by row gives), the
    others each from its own row and generator as sample() does."""
    rows = logits[start:start + len(params)]
    if rows.dim() == 1:  # the null model: each row is a token it chose itself
        return [int(t) for t in rows.tolist()]
    greedy = rows.argmax(-1).tolist() if any(p.greedy for p in params) else None
    return [greedy[i] if p.greedy else sample(rows[i], p, rngs[i]) for i, p in enumerate(params)]


def top2_margin(logits: torch.Tensor) -> float:
    """Gap between the two largest logits: how close a greedy choice was to a tie."""
    top = torch.topk(logits.float(), 2).values
    return float(top[0] - top[1])
