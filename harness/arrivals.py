"""Arrival patterns, one class each: its fields in the scenario format and the send times it
draws for a group's clients from the scenario's seed (times()), together. harness/plan.py plans
every client with them; join_while's times count from the named group's first token
(harness/clients.launch)."""

from __future__ import annotations

import random
from typing import Annotated, Literal, Union

from pydantic import Field, model_validator

from harness.strict import Strict


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
    (harness/capacity.py): the same overload on a slower or a faster machine."""
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
            raise ValueError("rate_x_capacity is resolved into rate_per_s before planning (harness.capacity)")
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


Arrival = Annotated[Union[AtOnce, Uniform, Poisson, Offsets, JoinWhile], Field(discriminator="kind")]
