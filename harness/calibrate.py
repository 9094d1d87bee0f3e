"""`streamlab scenario calibrate`: fit the simulation's cost model on this machine.

1. The engine terms, in-process (harness.profile.calibrate_engine).
2. The serving terms, from live runs of the calibration scenarios in scenarios/calibration/
   (`streamlab serve` on real sockets; its /debug/steps and the clients' traces):
   - per_step_s, per_event_s: a least-squares line through (live period of a decode step -
     the engine's cost for it) against the events it made. The event loop delivers a step's
     events while the next step runs, and the two share one GIL, so serving shows up as a
     longer period, not as a gap;
   - per_request_s: the median spacing of response heads in a burst (one core handles them
     one after another);
   - request_latency_s: a lone request's live TTFT minus its simulated TTFT without that term.
   Then the calibration scenarios are simulated with the whole profile and the live/sim
   ratios are stored with it, as the fit's residuals.
There is no separate term for the client's share of the cores: the clients read on the other
core while the server works, and what they cost the server cannot be told apart from
per_event_s (both grow with events per step), so it is part of it.
"""

from __future__ import annotations

import dataclasses
import json
import statistics

from harness.profile import PROFILES, StepCostProfile, _fit, calibrate_engine
from harness.report import Trace, metric_values, percentile
from harness.scenario import SCENARIOS_DIR, load

CALIBRATION_DIR = SCENARIOS_DIR / "calibration"
REPEATS = 2  # live runs per calibration scenario
MAX_PERIOD_S = 0.05  # a longer period between two busy steps is the machine's noise, not serving cost


def calibration_scenarios(model: str) -> list:
    out = []
    for path in sorted(CALIBRATION_DIR.glob("*.yaml")):
        scenario = load(path)
        out.append(scenario.model_copy(update={"server": scenario.server.model_copy(update={"model": model})}))
    return out


def _decode_steps(trace: Trace) -> list[tuple[dict, float]]:
    """Decode-only steps followed by another busy step: (step, its period to the next one's start)."""
    out = []
    for a, b in zip(trace.steps, trace.steps[1:]):
        if a["decoded"] and not a["prefilled"] and (b["decoded"] or b["prefilled"]):
            period = b["began"] - a["began"]
            if period <= MAX_PERIOD_S:
                out.append((a, period))
    return out


def fit_serving(profile: StepCostProfile, traces: list[Trace]) -> tuple[float, float, int]:
    """(per_step_s, per_event_s, samples): live period minus engine cost, against events per step."""
    from streamlab.engine.engine import StepOutput

    xs, ys = [], []
    for trace in traces:
        for step, period in _decode_steps(trace):
            xs.append(float(step["decoded"]))
            ys.append(period - profile.engine_cost(StepOutput(0, [], [], 0, step["decoded"])))
    if len(set(xs)) < 2:
        raise RuntimeError("calibration runs gave decode steps of one size only: cannot fit a per-event cost")
    per_step, per_event = _fit(xs, ys)
    return per_step, per_event, len(xs)


def fit_per_request(traces: list[Trace]) -> tuple[float, int]:
    """Core time per request in a burst: from the first send to the last response head, per request
    (median over the runs). Head to head spacing alone is too short: heads go out in clumps."""
    per_run, n = [], 0
    for trace in traces:
        sent = min(s.sent_at for s in trace.streams if s.sent_at is not None)
        heads = [s.head_at for s in trace.streams if s.head_at is not None]
        per_run.append((max(heads) - sent) / len(heads))
        n += len(heads)
    return statistics.median(per_run), n


def ttft_differences(live: list[Trace], sim: Trace) -> list[float]:
    out = []
    for trace in live:
        for a, b in zip(trace.streams, sim.streams):
            if a.token_times and b.token_times and a.sent_at is not None and b.sent_at is not None:
                out.append((a.token_times[0] - a.sent_at) - (b.token_times[0] - b.sent_at))
    return out


def residuals(live: dict[str, list[Trace]], sim: dict[str, Trace]) -> dict:
    """live/sim p50 per calibration scenario and metric (1.0 is a perfect fit)."""
    out = {}
    for name, traces in live.items():
        for metric in ("ttft_s", "completion_s", "gap_s"):
            s = percentile(metric_values(sim[name].streams, metric), 50)
            lv = statistics.median(percentile(metric_values(t.streams, metric), 50) for t in traces)
            if s and lv:
                out[f"{name} {metric}"] = round(lv / s, 3)
    return out


def calibrate(model: str, engine_only: bool = False, console=None, repeats: int = REPEATS) -> StepCostProfile:
    from harness.runner import run_live, run_trace
    from harness.simulation import SimBackend

    say = console.print if console is not None else print
    engine = calibrate_engine(model)
    path = PROFILES / f"{model}.json"
    old = json.loads(path.read_text()) if path.exists() else {}  # an older profile's terms may differ
    keep = {"send_buffer_bytes", "server_side_buffer_bytes"} | (
        {"per_step_s", "per_event_s", "per_request_s", "request_latency_s", "calibration"} if engine_only else set())
    profile = dataclasses.replace(engine, **{k: old[k] for k in keep if k in old})
    say(f"engine terms (in-process): decode {engine.decode_s}, "
        f"per prefill {engine.prefill_fixed_s * 1e3:.3f} ms, per prompt token {engine.prefill_per_token_s * 1e6:.2f} us")
    if engine_only:
        return profile
    scenarios = calibration_scenarios(model)
    live: dict[str, list[Trace]] = {}
    for scenario in scenarios:
        for i in range(repeats):
            trace, _ = run_live(scenario)
            live.setdefault(scenario.name, []).append(trace)
            say(f"live {scenario.name} run {i + 1}: {len(trace.steps)} steps, {trace.wall_s:.1f}s")
    all_live = [t for ts in live.values() for t in ts]
    per_step, per_event, n_steps = fit_serving(profile, all_live)
    bursts = [t for name, ts in live.items() if name != "cal_solo" for t in ts]
    per_request, n_heads = fit_per_request(bursts)
    profile = dataclasses.replace(profile, per_step_s=per_step, per_event_s=per_event, per_request_s=per_request,
                                  request_latency_s=0.0)
    solo = next(s for s in scenarios if s.name == "cal_solo")
    diffs = ttft_differences(live["cal_solo"], run_trace(solo, SimBackend(profile))[0])
    latency = max(0.0, statistics.median(diffs))
    profile = dataclasses.replace(profile, request_latency_s=latency)
    sims = {s.name: run_trace(s, SimBackend(profile))[0] for s in scenarios}
    fit = residuals(live, sims)
    profile = dataclasses.replace(profile, calibration={
        "scenarios": [s.name for s in scenarios], "live_runs_each": repeats, "decode_steps": n_steps,
        "burst_heads": n_heads, "lone_requests": len(diffs), "live_over_sim_p50": fit})
    say(f"serving terms (live): per step {per_step * 1e6:.0f} us, per event {per_event * 1e6:.1f} us, "
        f"per request {per_request * 1e3:.2f} ms, lone request latency {latency * 1e3:.2f} ms")
    say(f"fit, live/sim p50 on the calibration runs: {fit}")
    return profile
