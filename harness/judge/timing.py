"""Timing judgement, one owner: latency bounds, the regression gate, parity and drift, their
tolerances and noise constants, and the one re-run rule.

The rule: every timing verdict compares figures measured on this machine in this session;
committed seconds are never compared with this machine's seconds.
- Simulated figures are virtual seconds under the committed profile. They are the same on
  every machine (the simulation is deterministic for a profile), so the simulated gate compares
  them with committed virtual seconds, tightly (SIM_GATE): a first token two steps late fails.
- Live figures are compared with the simulation of the same scenario under this machine's
  profile (harness/fit/machine.py: fitted here, cached, refitted when the machine's speed moves).
  A committed live baseline is therefore a ratio, live/sim, that any machine measures again;
  the simulation knows which part of a figure is the engine, which the network's fixed delay.
- The engine's speed, timed after each run on the run's own engine code, is judged against a
  yardstick timed with it that runs none of our engine's code (harness/machine/speed.py), over the same
  paired reading stored in the committed profile. A slower machine slows both; a slower engine
  ours only.

The re-run rule (AGAIN): a live timing verdict that fails on one run is judged again with one
more back-to-back run, and once more while it still fails, RUNS runs at most; each figure on the
best of them: the one nearest the inside of its bound. A stall or a regression, slow in every
run, still fails; a negative control must fail in each. A ratio is never formed across runs (a
fast baseline from one pair cannot rescue a slow run of another).

About 500 lines, on purpose: every timing verdict, its bound and the re-run rule have one owner
(issue 21), so a bound cannot be loosened in one place and kept in another.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from harness.judge.baselines import gated_figures
from harness.judge.bounds import DRIFT, FIGURE, LIVE_GATE, PARITY_COMPLETION, PARITY_TTFT, SIM_GATE
from harness.machine.pace import PACED, machine_pause
from harness.record.trace import Trace, holds_nothing, interquartile_mean, metric_values, outcomes, percentile
from harness.record.verdict import CheckResult

if TYPE_CHECKING:
    from harness.format.scenario import Scenario
    from harness.format.expect import LatencyBound


def better(values: list[float], low: float = 0.0, high: float = 1.0) -> float:
    """The one re-run rule's combiner: of one figure's runs, the one nearest the inside of
    [low, high], by how far outside it lies as a ratio."""
    def outside(v: float) -> float:
        if v <= 0:
            return 0.0 if low <= 0 else math.inf
        return max(math.log(low / v) if low > 0 else 0.0, math.log(v / high), 0.0)
    return min(values, key=outside)


def p50(trace: Trace, group: str, metric: str) -> float | None:
    return percentile(metric_values(trace.group(group), metric), 50)


def typical(trace: Trace, group: str, metric: str) -> float | None:
    """A group's figure as parity compares it: the interquartile mean (harness.record.trace)."""
    return interquartile_mean(metric_values(trace.group(group), metric))


# ---- a scenario's own latency bounds (absolute, or a ratio to a group run in the same pair) ----

def latency(scenario: "Scenario", trace: Trace, baselines: dict[str, Trace],
            again: list[tuple[Trace, dict[str, Trace]]] = ()) -> CheckResult:
    """Each latency bound, absolute or a ratio to a group (of this or another scenario). `again`:
    more runs of the scenario, each with its baseline scenarios run just after it; each bound is
    then judged on the best of the pairs (AGAIN). An absolute `max_s` belongs to the
    machine it was written on; a ratio travels."""
    runs = [(trace, baselines), *again]
    problems, figures, bounds = [], [], []
    for b in scenario.expect.latency:
        label = f"{b.group} {b.metric} p{b.percentile:g}"
        judged = [_latency_run(b, label, t, base) for t, base in runs]
        if any(isinstance(j, str) for j in judged):
            problems.append(next(j for j in judged if isinstance(j, str)))
            continue
        best = better([j[0] / j[1] for j in judged])
        value, limit, base = next(j for j in judged if j[0] / j[1] == best)
        if b.max_s is not None:
            bounds.append(f"{label} <= {b.max_s:g}s")
        else:
            bounds.append(f"{label} <= {b.max_ratio:g} x {b.baseline_scenario or 'group'} "
                          f"{b.baseline_group or b.group} ({base * 1e3:.1f}ms)")
        figures.append(f"{label} {value * 1e3:.1f}ms")
        if value > limit:
            problems.append(f"{label} = {value * 1e3:.1f}ms > {limit * 1e3:.1f}ms")
    return CheckResult("latency", not problems, ("; ".join(figures) or "none") + best_of(len(runs)),
                       "; ".join(bounds), problems)


def best_of(runs: int) -> str:
    return f" (better of {runs} runs)" if runs == 2 else f" (best of {runs} runs)" if runs > 2 else ""


def _latency_run(b: "LatencyBound", label: str, trace: Trace,
                 baselines: dict[str, Trace]) -> tuple[float, float, float | None] | str:
    """One run's (value, limit, baseline value) for bound `b`, or what is missing."""
    value = percentile(metric_values(trace.group(b.group), b.metric), b.percentile)
    if value is None:
        return f"{label}: no samples"
    if b.max_s is not None:
        return value, b.max_s, None
    base_trace = baselines[b.baseline_scenario] if b.baseline_scenario else trace
    base_group = b.baseline_group or b.group  # in the baseline scenario, if one is named
    base = percentile(metric_values(base_trace.group(base_group), b.metric), b.percentile)
    if not base:
        return f"{label}: baseline {b.baseline_scenario or ''}{base_group} has no samples"
    return value, b.max_ratio * base, base


# ---- the regression gate against scenarios/baselines.json ----

def regression(trace: Trace, baselines: dict, sim: Trace | None = None, again: list[Trace] = ()) -> CheckResult:
    """The gate against the committed figures. Simulated: virtual seconds, SIM_GATE. Live: each
    group's figure at most LIVE_GATE over its committed live/sim ratio times this session's
    simulated figure (`sim`, under this machine's profile). `again`: more live runs; each figure
    is then judged on the best of them (AGAIN)."""
    base = baselines.get(trace.scenario, {}).get(trace.mode)
    if not base:
        return CheckResult("regression", True, f"no committed {trace.mode} baseline for {trace.scenario} in "
                           "scenarios/baselines.json", "the gate over the committed figures", compared=0)
    if trace.mode == "sim":
        allowance, expected = SIM_GATE, base
    else:
        allowance = LIVE_GATE
        if sim is None:
            return CheckResult("regression", None, "no simulation of this scenario on this machine to scale the "
                               "committed live/sim ratios by", "not evaluated")
        predicted = gated_figures(sim)
        expected = {g: {k.removesuffix("_over_sim"): r * predicted[g][k.removesuffix("_over_sim")]
                        for k, r in row.items() if predicted.get(g, {}).get(k.removesuffix("_over_sim"))}
                    for g, row in base.items()}
    runs = [gated_figures(t) for t in (trace, *again)]
    problems, shown = [], []
    for group, row in expected.items():
        for key, reference in row.items():
            values = [r[group][key] for r in runs if key in r.get(group, {})]
            if not values:
                continue
            new = min(values)
            limit = allowance.limit(reference)
            unit = "baseline" if trace.mode == "sim" else "committed live/sim x sim now"
            shown.append(f"{group} {key} {new * 1e3:.0f}ms ({unit} {reference * 1e3:.0f}ms)")
            if new > limit:
                problems.append(f"{group} {key} = {new * 1e3:.1f}ms > {limit * 1e3:.1f}ms")
    what = "baseline" if trace.mode == "sim" else "committed live/sim ratio x this machine's simulated figure"
    return CheckResult("regression", not problems,
                       "; ".join(shown[:6]) + ("; ..." if len(shown) > 6 else "") + best_of(len(runs)),
                       f"<= {allowance} {what} ({trace.mode})", problems)


# ---- parity: live against its simulation ----

def timing_tolerance(scenario: "Scenario", group: str) -> list[tuple[str, float, float]]:
    wider = scenario.expect.parity
    use = wider if wider and (not wider.groups or group in wider.groups) else None
    ttft = (use and use.ttft) or PARITY_TTFT
    completion = (use and use.completion) or PARITY_COMPLETION
    return [("ttft_s", *ttft), ("completion_s", *completion)]


def timing_ratio(live: Trace, sim: Trace, group: str, metric: str, figure=typical) -> float | None:
    lv, sv = figure(live, group, metric), figure(sim, group, metric)
    return lv / sv if lv and sv else None


def parity_rows(scenario: "Scenario", pairs: list[tuple[Trace, Trace]]) -> list[dict]:
    """One row per group and timing metric: the simulated and live interquartile means of the first
    of `pairs` (a live run and the simulation it is judged against) and their ratio, in bounds or
    not (the p50s' ratio beside it, reported). With more live runs, each against its own
    simulation (at that run's pace), the ratio judged is the best of them (AGAIN).

    A run late by no more than one machine pause (machine_pause: measured in that run, in that
    group's span) agrees: its figure less the pause is within the upper bound (the lower bound is
    not moved: a pause only makes a figure late). The simulation spreads the machine's pauses over
    every step as their mean (the fit's mean periods), while live a whole pause lands in a figure
    or none does. At a 0.25 quota (5 ms of CPU per 10 ms on 2 cores) a lone first token simulated
    at 9.3 ms read 15.6-19.1 ms live in three runs, 1.68-2.05x, its prefill step holding an 8 ms
    pause; a figure of hundreds of milliseconds is not moved by one pause, and unthrottled a pause
    is another process's time slice.
    """
    rows = []
    live, sim = pairs[0]
    for group in dict.fromkeys(s.group for s in sim.streams):
        for metric, lo, hi in timing_tolerance(scenario, group):
            runs = [(n, r, t, st) for n, (t, st) in enumerate(pairs, 1) if (r := timing_ratio(t, st, group, metric))]
            if not runs:
                continue
            ratios = [r for _, r, _, _ in runs]
            ratio = better(ratios, lo, hi)
            late = None
            if not lo <= ratio <= hi:
                late = next(({"run": n, "ratio": r, "pause_s": pause} for n, r, t, st in runs
                             if lo <= r and (typical(t, group, metric) - (pause := machine_pause(t, group, metric)))
                             <= hi * typical(st, group, metric)), None)
            rows.append({"scenario": scenario.name, "group": group, "metric": metric,
                         "sim_s": typical(sim, group, metric), "live_s": typical(live, group, metric),
                         "ratio": ratio, "p50_ratio": timing_ratio(live, sim, group, metric, p50),
                         "ratios": ratios, "low": lo, "high": hi, "late_by_a_pause": late,
                         "ok": lo <= ratio <= hi or late is not None})
    return rows


def parity(scenario: "Scenario", pairs: list[tuple[Trace, Trace]], judge_timing: bool = True) -> CheckResult:
    """Live and simulation agree on outcomes, token ids and releases exactly, and on each group's
    TTFT and completion (interquartile means) within a ratio (the scenario may widen it for some
    groups, with a reason). `pairs`: the live run and its simulation, then any further live runs
    (made while the first were out of bounds on timing only), each with its own simulation; each
    ratio is judged on the best of them (AGAIN)."""
    problems, ratios = [], []
    live, sim = pairs[0]
    wider = scenario.expect.parity
    varying = set(scenario.expect.outcomes_vary.groups) if scenario.expect.outcomes_vary else set()
    for name in dict.fromkeys(s.group for s in sim.streams):
        got_live, got_sim = outcomes(live.group(name)), outcomes(sim.group(name))
        if got_live != got_sim and name in varying:
            ratios.append(f"{name} outcomes live {got_live}, sim {got_sim} (decided by timing)")
        elif got_live != got_sim:
            problems.append(f"{name}: live {got_live}, sim {got_sim}")
    for row in parity_rows(scenario, pairs):
        runs = (f" ({len(row['ratios'])} live runs: {', '.join(f'{r:.2f}x' for r in row['ratios'])})"
                if len(row["ratios"]) > 1 else "")
        ratios.append(f"{row['group']} {row['metric']} {row['ratio']:.2f}x{runs}")
        if (late := row["late_by_a_pause"]) is not None:
            ratios[-1] += (f" (run {late['run']}: {late['ratio']:.2f}x, late by no more than one machine pause, "
                           f"{late['pause_s'] * 1e3:.1f} ms)")
        if not row["ok"]:
            what = f"{row['group']} {row['metric']} {FIGURE} live/sim {row['ratio']:.2f}x outside [{row['low']:g}, {row['high']:g}]"
            if judge_timing:
                problems.append(what + runs)
            else:
                ratios[-1] += f" (outside [{row['low']:g}, {row['high']:g}]: reported, not judged here)"
    for a, b in zip(live.streams, sim.streams):
        n = min(len(a.token_ids), len(b.token_ids))
        if a.token_ids[:n] != b.token_ids[:n]:
            problems.append(f"{a.group}#{a.index}: live and sim tokens differ")
    if len(live.releases) != len(sim.releases) and not varying:
        problems.append(f"releases: live {len(live.releases)}, sim {len(sim.releases)}")
    if holds_nothing(live) != holds_nothing(sim):
        problems.append("one mode leaked and the other did not")
    bound = (f"same outcomes, token ids, releases and leaks; {FIGURE} live/sim completion in "
             f"[{PARITY_COMPLETION[0]:g}, {PARITY_COMPLETION[1]:g}], TTFT in [{PARITY_TTFT[0]:g}, {PARITY_TTFT[1]:g}]"
             f"{best_of(len(pairs))}, or late by no more than one pause of the machine's in that run; simulated under this session's profile"
             f"{''.join('; ' + n for _, t in pairs for n in t.notes if n.startswith(PACED))}")
    if wider:
        bound += f"; wider for {', '.join(wider.groups) or 'every group'}: {wider.reason}"
    return CheckResult("parity", not problems, "; ".join(ratios) or "no timings", bound, problems)


def timing_only(check: CheckResult) -> bool:
    """A failed parity whose every problem is a timing ratio (outcomes, tokens, releases agree)."""
    return check.passed is False and all(f" {FIGURE} live/sim " in p for p in check.details)


def engine_over_yardstick(trace: Trace) -> float | None:
    """The engine over the yardstick now, over the same when the profile was made: 1.0 is the
    profile's engine, on any machine. Times its steps' wall over CPU time, over the yardstick's
    (1.00 for a step that only computes, 1.5 for one that waits half its time again), where read."""
    t = trace.step_timing
    return t.get("engine_slowdown", t.get("engine_over_yardstick"))


def drift(trace: Trace, again: list[Trace] = ()) -> CheckResult:
    """Did the engine get slower? Its decode step alone now, over the profile's, over the yardstick
    now over then, times its steps' wall over CPU time over the yardstick's (a step slower by
    waiting: CPU time alone cannot see it): at most DRIFT; live, on the best of its runs (AGAIN)."""
    t = trace.step_timing
    if t.get("engine_over_profile") is None:
        return CheckResult("profile_drift", None, "the engine's speed was not measured on this server",
                           "not evaluated")
    if t.get("engine_over_yardstick") is None:
        return CheckResult("profile_drift", None, "the profile stores no yardstick time (made before "
                           "harness/machine/speed.py); recalibrate with `streamlab scenario calibrate`", "not evaluated")
    values = [v for v in map(engine_over_yardstick, (trace, *again)) if v is not None]
    value = min(values)
    shown = (f"decode step alone {t['engine_over_profile']:.2f}x the profile's, the yardstick beside it {t['speed_factor']:.2f}x "
             f"its time on the profile's machine"
             + (f", the engine's steps' wall over CPU time {t['engine_waits']:.2f}x the yardstick's" if t.get("engine_waits") else "")
             + f": engine {value:.2f}x, paired burst by burst"
             + best_of(len(values))
             + (f" (read {t['reused_after_s']:g} s earlier, the same engine)" if "reused_after_s" in t else ""))
    return CheckResult("profile_drift", value <= DRIFT, shown,
                       f"<= {DRIFT:g}x (profile made on {t.get('profile_machine') or 'unknown'})")


# ---- every timing verdict of a run, and the re-run rule ----

@dataclass
class Run:
    """One run of a scenario as its timing verdicts see it: the trace, the traces of the baseline
    scenarios its latency ratios are formed with (run in the same session, or just after it),
    and, live, parity's simulation at the run's pace (None: the pace did not move)."""
    trace: Trace
    latency_traces: dict[str, Trace]
    paced: Trace | None = None


def judge(scenario: "Scenario", runs: list[Run], committed: dict, sim: Trace | None,
          judge_parity_timing: bool = True) -> list[CheckResult]:
    """The timing checks of a scenario's runs (one, or up to RUNS under AGAIN): drift, the
    scenario's latency bounds, the regression gate (against `committed`, scenarios/baselines.json,
    and `sim`, this scenario simulated under this machine's profile) and, live, parity with the
    simulation at each run's pace (`sim` where it did not move); each figure on the best run."""
    first, more = runs[0], [r.trace for r in runs[1:]]
    out = [drift(first.trace, more)]
    if scenario.expect.latency:
        out.append(latency(scenario, first.trace, first.latency_traces,
                           [(r.trace, r.latency_traces) for r in runs[1:]]))
    if first.trace.target is None:  # the committed baselines are the scenario's own server's, not a target's
        out.append(regression(first.trace, committed, sim, more))
    if sim is not None:
        out.append(parity(scenario, [(r.trace, r.paced or sim) for r in runs], judge_parity_timing))
    return out


def wants_again(checks: list[CheckResult], controls: list[str] = ()) -> bool:
    """AGAIN: a live scenario one of whose timing verdicts failed on its figures gets another run
    (parity only when outcomes, tokens and releases agreed: those are never retried away), up to
    RUNS in all. A negative control's check (`controls`, the file's expect_failure) failed as
    designed: another run could only turn its designed failure into a pass on the best of them,
    and it cost the naive files 20 s each."""
    return any(c.passed is False and c.name not in controls and (c.name != "parity" or timing_only(c))
               for c in checks)
