"""The gate: each scenario live on both sides, in interleaved rounds, one server up at a time;
every run's outcomes checked before any figure is compared.

Rounds alternate ABBA (round 1 baseline then candidate, round 2 candidate then baseline, ...) or
are shuffled from a seed, so a machine that drifts within the gate slows both sides alike and
neither always runs first after the other's server stopped.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from harness.compare.sides import Side
from harness.compare.stats import Judged, figures, judge, least_rounds, smallest_detectable
from harness.format.scenario import Scenario
from harness.judge.checks import run_checks
from harness.live.backend import live_unavailable
from harness.run.once import run_trace
from harness.run.references import References


@dataclass
class SideRuns:
    """One side's rounds of one scenario: each run's figures and what its outcomes broke."""
    figures: list[dict[str, float]] = field(default_factory=list)
    broken: list[str] = field(default_factory=list)  # "round 3: leak_free: ..." (non-timing checks that failed)
    wall_s: float = 0.0


@dataclass
class ScenarioGate:
    scenario: str
    baseline: SideRuns
    candidate: SideRuns
    judged: list[Judged] = field(default_factory=list)
    detectable: dict[str, float | None] = field(default_factory=dict)  # A/A: figure -> smallest slowdown it would catch
    refused: str | None = None  # could not run here (why)

    @property
    def outcomes_differ(self) -> bool:
        return bool(self.baseline.broken or self.candidate.broken)


@dataclass
class Settings:
    rounds: int = 16
    alpha: float = 0.01
    threshold: float = 0.10
    order: str = "abba"  # or "shuffle"
    seed: int = 0

    def check(self) -> None:
        if self.rounds < least_rounds(self.alpha):
            raise ValueError(f"--rounds {self.rounds}: a signed-rank test over fewer than {least_rounds(self.alpha)} "
                             f"rounds can never reach --alpha {self.alpha:g} (its smallest p is 2/2^rounds)")
        if self.order not in ("abba", "shuffle"):
            raise ValueError(f"--order: expected abba or shuffle, got {self.order!r}")


def schedule(settings: Settings) -> list[tuple[str, str]]:
    """Per round, which side runs first: ("baseline", "candidate") or the reverse."""
    ab, ba = ("baseline", "candidate"), ("candidate", "baseline")
    if settings.order == "abba":
        return [ab if r % 2 == 0 else ba for r in range(settings.rounds)]
    rng = random.Random(settings.seed)
    return [ab if rng.random() < 0.5 else ba for _ in range(settings.rounds)]


def one_run(scenario: Scenario, side: Side, fresh_process: bool, references: References) -> tuple[dict, list[str]]:
    """One live run on a side: its figures, and its failed non-timing checks (leaks, exactly-once,
    identity, finish reasons and the scenario's own outcome checks)."""
    scenario = side.scenario_for(scenario)
    backend = side.backend(fresh_process)
    try:
        trace, planned = run_trace(scenario, backend)
    finally:
        backend.close()  # one server up at a time
    checks = run_checks(scenario, trace, references.identity(scenario, trace, planned))
    return figures(trace), [f"{c.name}: {c.figure}" for c in checks if not c.ok]


def gate_scenario(scenario: Scenario, sides: dict[str, Side], settings: Settings, references: References,
                  say: Callable[[str], None]) -> ScenarioGate:
    """Both sides' rounds of one scenario, then each figure judged."""
    runs = {"baseline": SideRuns(), "candidate": SideRuns()}
    out = ScenarioGate(scenario.name, runs["baseline"], runs["candidate"])
    refused = next((r for r in (live_unavailable(scenario, s.target) for s in sides.values()) if r), None)
    if refused:
        out.refused = refused
        return out
    fresh = any(s.source is not None for s in sides.values())
    t0 = time.monotonic()
    for r, order in enumerate(schedule(settings), 1):
        for name in order:
            start = time.monotonic()
            got, broken = one_run(scenario, sides[name], fresh, references)
            runs[name].figures.append(got)
            runs[name].broken += [f"round {r}: {b}" for b in broken]
            runs[name].wall_s += time.monotonic() - start
        left = (time.monotonic() - t0) / r * (settings.rounds - r)
        say(f"compare {scenario.name}: round {r}/{settings.rounds} ({' then '.join(order)})"
            f"{' outcomes differ' if out.outcomes_differ else ''}, about {left:.0f} s left")
    names = [f for f in runs["baseline"].figures[0] if all(f in g for s in runs.values() for g in s.figures)]
    for figure in names:
        base = [g[figure] for g in runs["baseline"].figures]
        cand = [g[figure] for g in runs["candidate"].figures]
        out.judged.append(judge(figure, base, cand, settings.alpha, settings.threshold, settings.seed))
        if sides["baseline"].label == sides["candidate"].label:
            out.detectable[figure] = smallest_detectable(figure, base, cand, settings.alpha, settings.threshold)
    return out
