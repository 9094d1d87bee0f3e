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
import statistics
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from harness.record.trace import Trace, holds_nothing, interquartile_mean, metric_values, outcomes, percentile
from harness.machine.cores import server_threads
from harness.machine.cpu_quota import quota_pause_s
from harness.record.verdict import CheckResult

if TYPE_CHECKING:
    from harness.machine.cost_model import StepCostProfile
    from harness.format.scenario import LatencyBound, Scenario


@dataclass(frozen=True)
class Allowance:
    """A figure may be up to `ratio` x its reference plus `slack_s`."""
    ratio: float
    slack_s: float

    def limit(self, reference_s: float) -> float:
        return self.ratio * reference_s + self.slack_s

    def __str__(self) -> str:
        return f"{self.ratio:g} x + {self.slack_s * 1e3:g}ms"


# Simulation: deterministic for a given profile, so 10% is room for a deliberate small change and
# still catches a first token two steps late. A new committed profile means new baselines.
SIM_GATE = Allowance(1.10, 0.0005)
# Live: the machine is shared and noisy. A fresh server's first tokens vary by 250 ms (41 against
# 230 ms seen), and one run in a few has a 0.5 s stall; the figure it multiplies is this
# machine's own simulated figure, so the ratio only has to cover the run's noise.
LIVE_GATE = Allowance(3.0, 0.25)
# capacity_restored's probe (a target's first tokens before and after a run) has one live
# figure's noise: the same allowance.
CAPACITY = LIVE_GATE
GATED = (("ttft_s", 50), ("completion_s", 50))  # the figures the regression gate keeps per group

# Parity: live/sim per group, unless a scenario widens it with a reason. First tokens carry more
# of the machine's noise than completions. The figure compared is each group's interquartile mean
# (typical()), not its nearest-rank p50: first tokens come in waves a prefill step apart, and over
# a few streams the p50 jumps a whole wave when one stream lands in the wave before (a CI run read
# slow_reader_drop_1's healthy TTFT 0.57x twice, 16.7 against 29.8 ms, where this run here read
# 0.78x; its interquartile means read 0.70x and 0.90x). The bounds are the same.
PARITY_COMPLETION = (0.7, 1.4)
PARITY_TTFT = (0.6, 1.6)
FIGURE = "IQM"  # how parity names the figure it compares (typical())

# Drift: the engine's decode step alone, timed right after the run on the run's own engine code,
# model, attention and lab slowdown (the server's /debug/engine-speed live, in-process in
# simulation), each burst paired with a burst of the yardstick (transformers' own GPT-2 on the
# same weights) at the same shape; their median ratio over the same paired reading stored in the
# profile when it was made (reference_s.pairs). Both in CPU time, both in
# tight loops. 1.0 is the engine the profile measured, on a slower or a faster machine. Timing
# the run's own steps instead was tried: what an unchanged engine read there depended on the run
# around its steps (0.9 to 1.7 in simulation, 1.0 to 1.4 live, moving up to 40% between suite
# runs of one scenario), which no 1.5x bound can see through. Reading the engine and the
# yardstick apart, each at its fastest, was tried next: the yardstick alone moved 1.0-1.6x
# between readings seconds apart, and a 1.5x slowdown written into the engine read 1.24x in CI.
# Against the profile's engine term over its yardstick time (two loops, not one pair) an unchanged
# engine read 0.76-0.93; against the stored pairs, 0.93-0.96, and 1.5x slowed 1.50-1.61.
# DRIFT 1.25: over the spread measured (docs/HARNESS.md) and under the 1.5x slowdown it must catch.
DRIFT = 1.25


# AGAIN: at most this many live runs of a scenario. Two left CI red in half its fresh-clone runs
# (stops 29 and 30 and a side run of 9c80cd2: one or two groups of about 80 each, out in both of
# their runs, every outcome, token and release equal): access_key's first tokens read 3.79x then
# 1.45x, disconnect_rst_mid's 2.12x then 1.75x; a minute of a shared machine spans two short runs.
# A third run costs a few seconds, only where two failed; a server that is slower fails all three.
RUNS = 3


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

def gated_figures(trace: Trace) -> dict[str, dict[str, float]]:
    """Each group's gated figures in seconds on the trace's own clock."""
    out: dict[str, dict[str, float]] = {}
    for group in dict.fromkeys(s.group for s in trace.streams):
        row = {}
        for metric, p in GATED:
            value = percentile(metric_values(trace.group(group), metric), p)
            if value is not None:
                row[f"{metric}_p{p}"] = round(value, 6)
        if row:
            out[group] = row
    return out


def baseline_figures(trace: Trace, sim: Trace | None = None) -> dict[str, dict[str, float]]:
    """What a baseline keeps of a run, in units any machine can measure again: a simulated run's
    virtual seconds, a live run's figures over its simulation under this machine's profile
    (`<figure>_over_sim`)."""
    out: dict[str, dict[str, float]] = gated_figures(trace) if trace.mode == "sim" else {}
    if trace.mode != "sim" and sim is not None:
        predicted = gated_figures(sim)
        for group, row in gated_figures(trace).items():
            ratios = {f"{k}_over_sim": round(v / predicted[group][k], 4) for k, v in row.items()
                      if predicted.get(group, {}).get(k)}
            if ratios:
                out[group] = ratios
    return out


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


def machine_pause(trace: Trace, group: str, metric: str) -> float:
    """The longest time the live step thread was ready to run but had no CPU in one step, or in one
    busy gap between two steps (BUSY_GAP_S), among those within the group's span for `metric`
    (its first send to its last first token, or to its last end): the machine's own quantum of
    time, a CPU quota's throttling pause or another process's time slice. Under a quota, no more
    than the longest pause it can make (harness.machine.cpu_quota.quota_pause_s): a step of several quota
    periods holds several pauses, and the simulation spreads all but one of them as it should.
    0 in simulation and for a server without a step log."""

    streams = [s for s in trace.group(group) if s.sent_at is not None]
    ends = [s.sent_at + v for s in streams for v in metric_values([s], metric)]
    if not ends or not trace.steps:
        return 0.0
    start, end = min(s.sent_at for s in streams), max(ends)
    longest = 0.0
    for a, b in zip(trace.steps, trace.steps[1:]):
        if a["began"] >= end or a["began"] + a["seconds"] <= start:
            continue
        in_step, in_gap = machine_waits(a, b)
        busy = busy_gap(a, b, in_gap) < BUSY_GAP_S and b["began"] < end
        longest = max(longest, min(in_step, a["seconds"]), in_gap if busy else 0.0)
    cap = quota_pause_s()
    return longest if cap is None else min(longest, cap)


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


# ---- the server's pace during a live run ----

# The machine moves by minutes: right after a fit the engine alone read 1.5x and the yardstick
# 1.3x their times at it, and a fit made in five rounds leaves a batch-8 step's serving term
# +-20% (1.1-2.5 ms per round under a 0.5 quota). A live run's own step log says how fast the
# server ran while it served the scenario; parity's simulation is run again at that pace where
# it moved past MOVED. The yardstick cannot stand in for it (bdbbb59, reverted: it read 1.4-2.05x
# while the Python-bound serving had not slowed). Only parity uses the paced simulation: the
# regression gate and the committed live/sim ratios keep the machine's profile, so a slower
# server is not paced away there, and drift judges the engine against the yardstick.
MOVED = 1.15  # past this the run's pace is the machine, not a fit's per-round spread
# A busy step loop begins the next step 0.03-0.1 ms after a step ends (live, at full speed and at a
# 0.5 quota); waiting for work, or for paused readers, it waits milliseconds to seconds.
BUSY_GAP_S = 0.001
PACE_MIN_STEPS = 20  # fewer busy steps are not a pace
# In the slow-reader files a quarter of the steps read about 3x what the profile says (the step
# thread waiting while the event loop writes to full buffers) and the rest about 1x: counted,
# they paced those files' healthy readers to 0.43-0.68x; left out (over 2x the run's median step),
# 1 group of 150 was out of bounds at full speed against 5 unpaced (offline, the same live runs).
PACE_OUTLIER = 2.0
PACED = "paced"  # how a paced simulation's note begins


def machine_waits(a: dict, b: dict) -> tuple[float, float]:
    """The step thread's run delay (ready to run, no CPU: streamlab.step_clock.CpuWait) in step
    `a`, and in the gap from its end to the next step `b`'s start; 0 where the log has none."""
    if "cpu_waited_end_s" not in a:  # a log without it (another server, an older one)
        return 0.0, 0.0
    began, ended = a.get("cpu_waited_s", 0.0), a["cpu_waited_end_s"]
    return max(0.0, ended - began), max(0.0, b.get("cpu_waited_s", 0.0) - ended)


def busy_gap(a: dict, b: dict, in_gap: float) -> float:
    """From step a's end to step b's start, less the time the step thread had no CPU in it."""
    return b["began"] - a["began"] - a["seconds"] - in_gap


def step_pace(trace: Trace, profile: "StepCostProfile",
              window: tuple[float, float] | None = None) -> tuple[float, int] | None:
    """The trace's busy step periods (the next step began within BUSY_GAP_S of this one's end, not
    counting the time the step thread was ready but had no CPU) over
    what `profile` says the same steps cost (engine and serving terms), and how many steps that is;
    with `window`, only the steps that began in it. A step over PACE_OUTLIER x the run's median is
    left out: the machine's pace moves every step, and such a step is one the cost model does not
    represent."""
    periods, costs = [], []
    per_byte = profile.serving_per_byte_s + profile.client_per_byte_s
    for a, b in zip(trace.steps, trace.steps[1:]):
        period = b["began"] - a["began"]
        # The bytes written to clients between the two steps, written and read on the same cores:
        # the simulation queues that work between its steps, while live it slows the step beside it.
        # Counted as the period's cost in both, a slow reader's large writes no longer read as a
        # slower machine (they paced slow_reader_pause_then_drop_2 by 1.74x at a 0.5 quota).
        bytes_s = per_byte * b.get("bytes_out", 0)
        # The step thread's time ready but not running (a CPU quota's throttling, other work on its
        # core) is the machine's, not a wait of the loop's: left out where busy and outlying are
        # judged, kept in the period, as the fit's mean periods keep it (calibrate.fit_serving).
        # Judged with it, a 0.25 quota's 7.5 ms pauses read as an idle loop or an outlier, and the
        # pace of what was left read 0.41-0.51x while the fit's own periods held them.
        in_step, in_gap = machine_waits(a, b)
        waited = min(period, in_step + in_gap)
        if period <= 0 or busy_gap(a, b, in_gap) - bytes_s >= BUSY_GAP_S:
            continue
        if window is not None and not window[0] <= a["began"] <= window[1]:
            continue
        periods.append((period, waited))
        costs.append(profile.logged_cost(a) + bytes_s)
    if len(periods) < PACE_MIN_STEPS or not all(costs):
        return None
    usual = statistics.median((p - w) / c for (p, w), c in zip(periods, costs))
    kept = [(p, c) for (p, w), c in zip(periods, costs) if (p - w) / c < PACE_OUTLIER * usual]
    return sum(p for p, _ in kept) / sum(c for _, c in kept), len(kept)


def group_window(trace: Trace, group: str) -> tuple[float, float] | None:
    """From the group's first request sent to its last stream's end, on the trace's clock."""
    streams = trace.group(group)
    sent = [s.sent_at for s in streams if s.sent_at is not None]
    stopped = [s.stopped_at for s in streams if s.stopped_at is not None]
    return (min(sent), max(stopped)) if sent and stopped else None


def pace(live: Trace, sim: Trace, profile: "StepCostProfile", group: str | None = None) -> float | None:
    """How much slower (above 1) the live server stepped than its simulation under `profile`, on the
    same measure: each trace's busy periods over the profile's cost of its own steps. The
    simulation's own figure (1.0 but for rounding) cancels what is the model's, not the server's.
    With `group`, only while that group ran in each trace (its own window). None where either has
    too few steps (another server has no step log, or the window is short)."""
    windows = (group_window(live, group), group_window(sim, group)) if group is not None else (None, None)
    if group is not None and not all(windows):
        return None
    a, b = step_pace(live, profile, windows[0]), step_pace(sim, profile, windows[1])
    return a[0] / b[0] if a and b else None


def run_pace(live: Trace, sim: Trace, profile: "StepCostProfile", groups: list[str]) -> float | None:
    """The machine's pace in a live run: of the whole run's pace and each group's (its own
    window), the one nearest 1. A slower machine slows every window alike, while what the model
    does not represent only adds to some: a slow reader's long tail set a whole run's pace to
    1.80x under a 0.5 quota where its healthy readers, done in the first 0.4 s, then read 0.68x;
    and at full speed the healthy readers' own window read 1.39x beside a slow reader's large
    writes where the whole run did not move, and paced by it they read 0.49-0.67x."""
    found = [k for k in [pace(live, sim, profile)] + [pace(live, sim, profile, g) for g in groups] if k]
    return min(found, key=lambda k: abs(math.log(k))) if found else None


def moved(k: float | None) -> bool:
    return k is not None and not 1 / MOVED <= k <= MOVED


# ---- drift: the engine's real steps against the yardstick ----

READINGS = 3  # the engine and the yardstick are read again while their figure is past DRIFT, up to this many times
# ...and at least twice: one reading is 14 burst pairs in about a second, and one second of a
# shared machine can spoil it.
AT_LEAST = 2


def same_engine(mode: str, server) -> tuple:
    """What a run's engine speed depends on, from its scenario's server spec: all that
    streamlab.bench_step.engine_speed builds its engine from (model, decode attention, the lab's
    slowdown) and the threads a server gets (harness.machine.cores), per mode (EngineReadings' key)."""
    return mode, server.model, server.decode_attention, server.lab_step_slowdown, server_threads()


class EngineReadings:
    """The drift check's readings of one session's engines (harness.run.runner.RunContext owns one).

    A passing reading stands for the runs after it whose engine reads the same: the same mode,
    model, decode attention, lab slowdown and threads (all that streamlab.bench_step.engine_speed
    builds its engine from), against the same profile. A reading takes 3.4-3.7 s a live run and
    1.6 s a simulated one, and CI judges 62 of each. It is a paired ratio, so the machine's drift
    cancels in it; it is read again after KEEP_S all the same, and a failing one is never kept,
    so a slower engine (another key) or a doubtful reading is always read afresh. An engine
    changed by code (a test's monkeypatch, a sitecustomize) is a new session's: a new
    RunContext."""

    KEEP_S = 300.0

    def __init__(self) -> None:
        self._kept: dict[tuple, tuple[float, dict]] = {}

    def measure(self, engine_speed, profile: "StepCostProfile", same_engine: tuple | None = None) -> dict:
        """measure_engine's reading; `same_engine`: what the engine's speed depends on (None: read
        afresh, keep nothing). A kept one comes back marked `reused_after_s`."""
        key = None if same_engine is None else (same_engine, profile.model, profile.machine,
                                                repr(sorted((profile.reference_s or {}).get("pairs", {}).items())))
        kept = self._kept.get(key) if key is not None else None
        if kept is not None and time.monotonic() - kept[0] < self.KEEP_S:
            return {**kept[1], "reused_after_s": round(time.monotonic() - kept[0], 1)}
        best = measure_engine(engine_speed, profile)
        if key is not None and best["engine_over_yardstick"] is not None and best["engine_over_yardstick"] <= DRIFT:
            self._kept[key] = (time.monotonic(), best)
        return best


def measure_engine(engine_speed, profile: "StepCostProfile") -> dict:
    """The drift check's readings for one run. engine_speed() is streamlab.bench_step.engine_speed
    on the run's engine code: our engine's decode bursts, each paired with a burst of the yardstick
    at the same shape. It is read AT_LEAST times, and again while past DRIFT, at most READINGS
    times; the lowest figure is kept. Each figure is already a median over pairs timed a few
    milliseconds apart, so a moment of the machine moves both sides of a pair, and a slower
    engine reads slow in every pair."""
    best: dict | None = None
    for i in range(READINGS):
        t = step_timing(engine_speed(), profile)
        t["readings"] = i + 1
        if best is None or (t["engine_over_yardstick"] or math.inf) < (best["engine_over_yardstick"] or math.inf):
            best = {**t}
        best["readings"] = i + 1
        if best["engine_over_yardstick"] is None or (i + 1 >= AT_LEAST and best["engine_over_yardstick"] <= DRIFT):
            break
    return best


def _geomean(values) -> float | None:
    values = [v for v in values if v and v > 0]
    return math.exp(statistics.fmean(math.log(v) for v in values)) if values else None


def step_timing(speed: dict, profile: "StepCostProfile") -> dict:
    """What a backend records for the drift check from one engine_speed() reading: the paired
    engine/yardstick ratio over the same ratio when the profile was made (its `reference_s`
    pairs, or for an older profile its engine term over the yardstick's time), judged; the engine over the profile's engine term
    and the yardstick over its own reference, reported."""
    then = (profile.reference_s or {}).get("decode_s") or {}
    pairs = (profile.reference_s or {}).get("pairs") or {}
    batches = [b for b in speed["decode_s"] if profile.decode_cost(int(b)) > 0 and then.get(b)]
    if pairs:  # the same paired reading when the profile was made (harness.machine.cost_model.engine_pairs)
        judged = _geomean(speed["engine_over_yardstick"][b] / pairs[b] for b in batches if pairs.get(b))
    else:  # a profile from before its pairs were stored: its engine term over its yardstick time
        judged = _geomean(speed["engine_over_yardstick"][b] / (profile.decode_cost(int(b)) / then[b]) for b in batches)
    return {"engine_over_yardstick": judged,
            "engine_over_profile": _geomean(speed["decode_s"][b] / profile.decode_cost(int(b)) for b in batches),
            "speed_factor": _geomean(speed["yardstick_s"][b] / then[b] for b in batches),
            "engine_decode_s": speed["decode_s"], "yardstick_s": speed["yardstick_s"],
            "pairs": speed["engine_over_yardstick"], "profile_machine": profile.machine}


def engine_over_yardstick(trace: Trace) -> float | None:
    """The engine over the yardstick now, over the same when the profile was made: 1.0 is the
    profile's engine, on any machine."""
    return trace.step_timing.get("engine_over_yardstick")


def drift(trace: Trace, again: list[Trace] = ()) -> CheckResult:
    """Did the engine get slower? Its decode step alone now, over the profile's, over the yardstick
    now over then: at most DRIFT; live, on the best of its runs (AGAIN)."""
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
             f"its time on the profile's machine: engine {value:.2f}x, paired burst by burst"
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
