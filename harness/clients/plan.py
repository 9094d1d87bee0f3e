"""A scenario's clients, planned from its seed: who arrives when, with which prompt and request."""

from __future__ import annotations

import random
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

from harness.format.arrivals import TraceArrival
from harness.format.scenario import CorpusPrompt, GroupSpec, Scenario
from streamlab.presets import PRESETS
from streamlab.prompts import shipped_prompts
from streamlab.tokenizer import shipped_tokenizer

if TYPE_CHECKING:  # torch: loaded only where our engine runs (target mode plans without it)
    from streamlab.models import LoadedModel


@dataclass
class PlannedClient:
    group: GroupSpec
    index: int
    at_s: float  # for join_while: seconds after the named group's first token
    prompt: str
    request: dict
    seed: int


def corpus_prompt(tokenizer, rng: random.Random, lo: int, hi: int) -> str:
    corpus = shipped_prompts()
    want = rng.randint(lo, hi)
    ids: list[int] = []
    start = rng.randrange(len(corpus))
    for k in range(len(corpus)):
        ids += tokenizer.encode(corpus[(start + k) % len(corpus)] + " ")
        if len(ids) >= want:
            break
    return tokenizer.decode(ids[:want])


def plan(scenario: Scenario, tokenizer) -> list[PlannedClient]:
    rng = random.Random(scenario.seed)
    planned = []
    for group in scenario.groups:
        times = group.arrival.times(group.count, rng)
        shapes = group.arrival.shapes(group.count) if isinstance(group.arrival, TraceArrival) else None
        for i in range(group.count):
            if shapes:  # a trace's request: its own prompt length and output length
                prompt = corpus_prompt(tokenizer, rng, shapes[i][0], shapes[i][0])
            else:
                prompt = (corpus_prompt(tokenizer, rng, *group.prompt.tokens)
                          if isinstance(group.prompt, CorpusPrompt) else group.prompt.text)
            req = group.request.model_dump()
            if shapes:
                req["max_new_tokens"] = shapes[i][1]
            if req["seed"] is not None:
                req["seed"] += i
            else:
                req.pop("seed")
            if req["ttft_deadline_ms"] is None:
                req.pop("ttft_deadline_ms")
            if not scenario.server.lab:  # lab options only go out when the server allows them
                req.pop("pad_bytes")
                req.pop("response_class")
            planned.append(PlannedClient(group, i, times[i], prompt, req, rng.randrange(2**31)))
    return planned


@lru_cache(maxsize=4)
def loaded_model(name: str) -> "LoadedModel":
    """Models are deterministic (seeded presets, or weights on disk): one load per process."""
    from streamlab.models import load_model

    return load_model(name)


@lru_cache(maxsize=4)
def tokenizer_for(name: str):
    """The tokenizer a scenario's prompts are cut with. A preset's is the shipped one, read
    without torch, so a run against a target plans its clients with no engine of ours installed;
    another model's comes with the model."""
    return shipped_tokenizer() if name in PRESETS else loaded_model(name).tokenizer
