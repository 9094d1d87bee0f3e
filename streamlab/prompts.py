"""The prompt corpus shipped beside the tokenizer (built by scripts/build_tokenizer.py)."""

from __future__ import annotations

import json
from functools import lru_cache

from streamlab.tokenizer import ASSETS


@lru_cache(maxsize=1)
def shipped_prompts() -> tuple[str, ...]:
    with open(ASSETS / "prompts.jsonl", encoding="utf-8") as f:
        return tuple(json.loads(line)["text"] for line in f if line.strip())


def prompts_near(chars: int, count: int) -> list[str]:
    """`count` prompts whose lengths are closest to `chars` characters, in corpus order."""
    ranked = sorted(shipped_prompts(), key=lambda p: abs(len(p) - chars))[:count]
    order = {p: i for i, p in enumerate(shipped_prompts())}
    return sorted(ranked, key=order.__getitem__)
