"""What a scenario expects of its run (its `expect:` block): outcomes per group, latency bounds,
release and waste bounds, parity's tolerances, goodput. The checks that judge them are
harness/judge/; every check's name is harness/format/check_names.py."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from harness.format.check_names import NAMES
from harness.format.strict import FieldProblem, Strict

# What a stream can end as, in a scenario's words (finish_reasons' keys, outcomes_vary's allowed):
# a normal finish, its client's own leaving, a refusal (a 4xx), or an error event our server sends.
# A 5xx is `server_error`: counted, never expected away as a refusal.
OUTCOMES = ("length", "eos", "stop", "client_left", "refused", "slow_client", "deadline_expired", "internal_error",
            "cancelled", "shutting_down", "server_error", "incomplete")


Metric = Literal["ttft_s", "gap_s", "completion_s"]


class LatencyBound(Strict):
    """A percentile of a group's metric, under an absolute bound or a multiple of a baseline's."""
    group: str
    metric: Metric
    percentile: float = Field(50, ge=0, le=100)
    max_s: float | None = Field(None, gt=0)
    max_ratio: float | None = Field(None, gt=0)
    baseline_group: str | None = None
    baseline_scenario: str | None = None

    @model_validator(mode="after")
    def _one_bound(self) -> "LatencyBound":
        if (self.max_s is None) == (self.max_ratio is None):
            raise ValueError("give exactly one of max_s and max_ratio")
        if self.max_ratio is not None and self.baseline_group is None and self.baseline_scenario is None:
            raise ValueError("max_ratio needs baseline_group (this or the baseline scenario's) or baseline_scenario")
        return self


class ReleaseWithin(Strict):
    steps: int = Field(1, ge=0)
    seconds: float = Field(0.25, gt=0)


CheckName = Literal[NAMES]  # every declared check (harness/format/check_names.py), so any can be a negative control


Ratio = tuple[Annotated[float, Field(gt=0)], Annotated[float, Field(gt=0)]]


class ParityTolerance(Strict):
    """A wider live/sim timing tolerance for some groups, with the reason the cost model misses them."""
    reason: str = Field(min_length=10, description="why the simulation cannot predict these groups' live times")
    groups: list[str] = Field(default_factory=list, description="the groups it applies to; empty: every group")
    completion: Ratio | None = Field(None, description="[low, high] live/sim completion (interquartile means); default: "
                                                       "harness.judge.timing.PARITY_COMPLETION (0.7, 1.4)")
    ttft: Ratio | None = Field(None, description="[low, high] live/sim TTFT (interquartile means); default: "
                                                 "harness.judge.timing.PARITY_TTFT (0.6, 1.6)")


class OutcomesVary(Strict):
    """Groups whose outcome each request gets is decided by timing (admission under overload):
    each outcome must be one of `allowed`, and live and simulation need not agree on the counts."""
    reason: str = Field(min_length=10)
    groups: list[str] = Field(min_length=1)
    allowed: list[str] = Field(min_length=1, description=f"outcomes, of {', '.join(OUTCOMES)}")


class Expectations(Strict):
    leak_free: bool = True
    exactly_once: bool = True
    identity: bool = True
    finish_reasons: dict[str, dict[str, int]] = Field(
        default_factory=dict, description=f"group -> {{outcome: count}}; outcomes: {', '.join(OUTCOMES)}")
    latency: list[LatencyBound] = Field(default_factory=list)
    release_within: ReleaseWithin | None = None
    waste: float | None = Field(None, gt=0, description="max tokens generated per token read, abandoned streams")
    expect_failure: list[CheckName] = Field(default_factory=list, description="negative controls: these must fail")
    parity: ParityTolerance | None = Field(None, description="live mode: a wider live/sim timing tolerance")
    outcomes_vary: OutcomesVary | None = None
    goodput: dict[str, Annotated[float, Field(ge=0, le=1)]] = Field(
        default_factory=dict, description="group -> the least fraction of its requests that must meet its slo")

    def outcome_problems(self) -> list[FieldProblem]:
        """Outcome names checked when the file loads; a group given counts and also let vary is
        refused (outcomes_vary would switch its counts off without a word)."""
        problems = []
        for group, counts in self.finish_reasons.items():
            for outcome in counts:
                if outcome not in OUTCOMES:
                    problems.append(FieldProblem(("expect", "finish_reasons", group, outcome),
                                                 f"unknown outcome {outcome!r}; expected one of {list(OUTCOMES)}"))
        vary = self.outcomes_vary
        for i, outcome in enumerate(vary.allowed if vary else []):
            if outcome not in OUTCOMES:
                problems.append(FieldProblem(("expect", "outcomes_vary", "allowed", i),
                                             f"unknown outcome {outcome!r}; expected one of {list(OUTCOMES)}"))
        for i, group in enumerate(vary.groups if vary else []):
            if group in self.finish_reasons:
                problems.append(FieldProblem(("expect", "outcomes_vary", "groups", i),
                                             f"{group!r} also has counts in finish_reasons, which outcomes_vary would "
                                             "not check; give the group one or the other"))
        return problems
