"""Arrival patterns, one class each: its fields in the scenario format and the send times it
draws for a group's clients from the scenario's seed (times()), together. harness/clients/plan.py plans
every client with them; join_while's times count from the named group's first token
(harness/clients/client.launch). A trace also gives each request's prompt and output lengths (shapes())."""

from __future__ import annotations

import random
from typing import Annotated, Literal, Union

from pydantic import Field, model_validator

from harness.format.strict import Strict
from harness.format.trace_arrivals import TraceFileError, read_trace


class AtOnce(Strict):
    kind: Literal["at_once"]
    at_s: float = Field(0.0, ge=0)

    def times(self, count: int, rng: random.Random) -> list[float]:
        return [self.at_s] * count


class Uniform(Strict):
    kind: Literal["uniform"]
    start_s: float = Field(0.0, ge=0)
    end_s: float = Field(gt=0)

    def times(self, count: int, rng: random.Random) -> list[float]:
        return sorted(rng.uniform(self.start_s, self.end_s) for _ in range(count))


class Poisson(Strict):
    """Exponential gaps at `rate_per_s` (this machine's seconds), or at `rate_x_capacity` times
    the requests per second this server sustains for the group's requests, probed in the session
    (harness/run/capacity.py): the same overload on a slower or a faster machine."""
    kind: Literal["poisson"]
    rate_per_s: float | None = Field(None, gt=0)
    rate_x_capacity: float | None = Field(None, gt=0)
    start_s: float = Field(0.0, ge=0)

    @model_validator(mode="after")
    def _one_rate(self) -> "Poisson":
        if (self.rate_per_s is None) == (self.rate_x_capacity is None):
            raise ValueError("give exactly one of rate_per_s and rate_x_capacity")
        return self

    def times(self, count: int, rng: random.Random) -> list[float]:
        if self.rate_per_s is None:
            raise ValueError("rate_x_capacity is resolved into rate_per_s before planning (harness.run.capacity)")
        t, out = self.start_s, []
        for _ in range(count):
            t += rng.expovariate(self.rate_per_s)
            out.append(t)
        return out


class Offsets(Strict):
    kind: Literal["offsets"]
    offsets_s: list[float] = Field(min_length=1)

    def times(self, count: int, rng: random.Random) -> list[float]:
        return [self.offsets_s[i % len(self.offsets_s)] for i in range(count)]


class JoinWhile(Strict):
    """Arrive uniformly in [start_s, end_s] after the first token of group `group`, while it runs."""
    kind: Literal["join_while"]
    group: str
    start_s: float = Field(0.0, ge=0)
    end_s: float = Field(1.0, gt=0)

    def times(self, count: int, rng: random.Random) -> list[float]:
        return sorted(rng.uniform(self.start_s, self.end_s) for _ in range(count))


class TraceArrival(Strict):
    """Each request's arrival time, prompt length and output length replayed from a trace (the
    group's `count` is how many requests it takes, in order, from `start_s`). Lengths are mapped
    onto our model: prompt tokens = the trace's x `prompt_scale`, output tokens = the trace's x
    `output_scale`, each rounded and kept within [1, max]; the prompt's text is cut from our
    corpus to that length. The defaults bring the Azure trace's (prompts: median 1,469 tokens
    for code, 1,020 for conversation; outputs: 13 and 129) to about 46 and 32 prompt tokens and
    3 and 32 output tokens."""
    kind: Literal["trace"]
    trace: str = Field(description="a shipped excerpt (scenarios/traces/: azure_code, azure_conversation) or a "
                                   "path to a CSV or JSONL file")
    time_column: str = Field("TIMESTAMP", description="seconds, or a date and time")
    prompt_column: str = "ContextTokens"
    output_column: str = "GeneratedTokens"
    start_s: float = Field(0.0, ge=0, description="start this many seconds into the trace")
    window_s: float | None = Field(None, gt=0, description="take only requests within this many seconds of start_s")
    speedup: float = Field(1.0, gt=0, description="the trace's time runs this many times faster")
    prompt_scale: float = Field(1 / 32, gt=0)
    output_scale: float = Field(1 / 4, gt=0)
    max_prompt_tokens: int = Field(64, ge=1)
    max_output_tokens: int = Field(32, ge=1)

    def rows(self, count: int) -> list[tuple[float, int, int]]:
        """The `count` requests replayed: (seconds after start_s, prompt tokens, output tokens)."""
        rows = [(t - self.start_s, p, o) for t, p, o in read_trace(self.trace, self.time_column, self.prompt_column,
                                                                   self.output_column)
                if t >= self.start_s and (self.window_s is None or t < self.start_s + self.window_s)]
        if len(rows) < count:
            raise TraceFileError(f"{self.trace}: {len(rows)} requests from {self.start_s:g} s"
                                 f"{f' within {self.window_s:g} s' if self.window_s else ''}, fewer than the "
                                 f"group's count {count}")
        return rows[:count]

    def times(self, count: int, rng: random.Random) -> list[float]:
        return [t / self.speedup for t, _, _ in self.rows(count)]

    def shapes(self, count: int) -> list[tuple[int, int]]:
        """(prompt tokens, max_new_tokens) for each request, mapped onto our model."""
        def fit(n: int, scale: float, most: int) -> int:
            return max(1, min(most, round(n * scale)))
        return [(fit(p, self.prompt_scale, self.max_prompt_tokens), fit(o, self.output_scale, self.max_output_tokens))
                for _, p, o in self.rows(count)]

    def longest(self) -> int:
        """The most tokens one of its requests can hold (prompt and output)."""
        return self.max_prompt_tokens + self.max_output_tokens


Arrival = Annotated[Union[AtOnce, Uniform, Poisson, Offsets, JoinWhile, TraceArrival], Field(discriminator="kind")]
