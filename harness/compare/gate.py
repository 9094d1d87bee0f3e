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
from harness.compare.stats import Judged, figures, holm, judge, least_rounds, smallest_detectable
from harness.format.scenario import Scenario
from harness.judge.checks import run_checks
from harness.live.backend import live_unavailable
from harness.run import capacity
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
    dropped: list[str] = field(default_factory=list)  # figures not judged, and why
    refused: str | None = None  # could not run here (why)
    notes: list[str] = field(default_factory=list)  # e.g. the load a relative scenario was given
    aa: bool = False  # both sides the same: every regression would be a false alarm

    @property
    def outcomes_broken(self) -> bool:
        return bool(self.baseline.broken or self.candidate.broken)

    def broken_sides(self) -> list[str]:
        return [n for n, r in (("baseline", self.baseline), ("candidate", self.candidate)) if r.broken]


@dataclass
class Settings:
    rounds: int = 16
    alpha: float = 0.01
    threshold: float = 0.10
    order: str = "abba"  # or "shuffle"
    seed: int = 0

    def check(self) -> None:
        if not 0 < self.alpha < 1:
            raise ValueError(f"--alpha: a significance level in (0, 1), got {self.alpha:g}")
        if self.threshold < 0:
            raise ValueError(f"--threshold: a fraction of 0 or more (0.10 is 10%), got {self.threshold:g}")
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


def side_trace(scenario: Scenario, side: Side, fresh_process: bool):
    """One live run of `scenario` on a side, its server stopped after (one server up at a time)."""
    scenario = side.scenario_for(scenario)
    backend = side.backend(fresh_process)
    try:
        return scenario, *run_trace(scenario, backend)
    finally:
        backend.close()


def one_run(scenario: Scenario, side: Side, fresh_process: bool, references: References) -> tuple[dict, list[str]]:
    """One live run on a side: its figures, and its failed non-timing checks (leaks, exactly-once,
    identity, finish reasons and the scenario's own outcome checks)."""
    scenario, trace, planned = side_trace(scenario, side, fresh_process)
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
    # Load and SLOs stated relative to capacity are made absolute once, on the baseline: each side
    # probed for itself, a slower candidate would be given less load and looser deadlines.
    scenario, probes = capacity.resolve(scenario, lambda probe: side_trace(probe, sides["baseline"], fresh)[1])
    out.notes += [f"load resolved on the baseline, for both sides: {p.line()}" for p in probes]
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
            f"{', outcomes broken on ' + ' and '.join(out.broken_sides()) if out.outcomes_broken else ''}, "
            f"about {left:.0f} s left")
    every = [g for r in runs.values() for g in r.figures]
    seen = list(dict.fromkeys(f for g in every for f in g))
    names = [f for f in seen if all(f in g for g in every)]
    out.dropped = [f"{f}: in {sum(f in g for g in every)} of {len(every)} runs" for f in seen if f not in names]
    for figure in names:
        base = [g[figure] for g in runs["baseline"].figures]
        cand = [g[figure] for g in runs["candidate"].figures]
        judged = judge(figure, base, cand, settings.alpha, settings.threshold, settings.seed)
        if judged.rounds < least_rounds(settings.alpha):  # rounds with a zero figure drop out of the pairs
            out.dropped.append(f"{figure}: {judged.rounds} rounds with a value, too few to reach alpha")
        out.judged.append(judged)
    out.aa = sides["baseline"].label == sides["candidate"].label
    return out


def finish(gates: list[ScenarioGate], settings: Settings) -> None:
    """Each scenario's figures judged as one family (stats.holm): a scenario of m figures reports a
    regression only where a figure's p reaches Holm's level, so an unchanged server is flagged in at
    most alpha of its gates, whether it is gated alone (a pytest item) or beside others (each
    scenario its own family: a gate of k scenarios at most k x alpha). Where the rounds cannot reach
    alpha / m at all, the scenario could never report one: it says so and does not pass. An A/A
    gate's smallest detectable slowdown per figure is read at the first level, alpha / m."""
    for g in gates:
        m = len(g.judged)
        if not m:
            continue
        g.judged = holm(g.judged, settings.alpha, settings.threshold)
        need = least_rounds(settings.alpha / m)
        if need > settings.rounds and not g.refused:
            g.refused = (f"{settings.rounds} rounds cannot reach alpha {settings.alpha:g} over {g.scenario}'s {m} "
                         f"figures (Holm's first level, alpha/{m}): give --rounds {need} or more")
        if g.aa:
            for j in g.judged:
                base = [f[j.figure] for f in g.baseline.figures]
                cand = [f[j.figure] for f in g.candidate.figures]
                g.detectable[j.figure] = smallest_detectable(j.figure, base, cand, settings.alpha / m,
                                                             settings.threshold)
