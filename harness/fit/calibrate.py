"""`streamlab scenario calibrate`: fit the simulation's cost model on this machine.

1. The engine terms, in-process (harness.machine.cost_model.calibrate_engine), with the server's torch threads.
2. The serving terms, from live runs of the calibration scenarios in scenarios/calibration/
   (`streamlab serve` on real sockets; its /debug/steps and the clients' traces):
   - serving_s: for each batch size the calibration scenarios run at (1, 4, 8, 16, 32), the
     mean of (live period of a decode step - the engine's in-process cost for it, at the
     context the step log says its decodes attended to). The
     event loop delivers a step's events while the next step runs, and the two share one
     GIL, so serving shows up as a longer period, not as a gap. A table, not a line: the
     periods are not linear in events (one event costs about nothing, eight ~1 ms);
   - serving_per_byte_s: the cost of each byte the server writes to a client, on the shared
     cores, chosen so that cal_unread's readers (beside streams whose padded events are written
     but left unread until the readers are done) complete in simulation when they did live
     (bisection); its steps' periods do not show it, the bytes queue behind them;
   - client_per_byte_s: then the cost of each byte a client reads (its copy and parse), chosen so
     that cal_padded (events carrying 64 KiB, read at once) completes in simulation when it did
     live. Two terms, not one, because a slow reader reads long after the server wrote: one term
     charged at the write put healthy readers beside slow readers at 0.66-0.68x of the
     simulation under a 0.5 CPU quota, where server and clients share one core;
   - per_request_s: the core time per request in a burst (one core handles them one after
     another), chosen so that the simulated bursts' head spans match the live ones (the steps
     that run inside a burst are the simulation's own, not the requests');
   - request_latency_s: a lone request's live TTFT minus its simulated TTFT without that term;
   - refused_request_s: the core time per request refused while it is read (cal_refused's burst of
     bad requests), fitted on head spans as per_request_s is: a refusal costs about half an
     admitted request, and charged a whole one it held the requests behind it in the queue.
   Then the calibration scenarios are simulated with the whole profile and the live/sim
   ratios are stored with it, as the fit's residuals.
For plain events there is no separate term for the client's share of the cores: what the
clients' reads of small events cost the server cannot be told apart from serving_s (both grow
with events per step), so it is part of it; only padded bytes are split as above. Nor one per
connection: every calibration request has its own connection, so that cost is part of
per_request_s.
The transport terms (where writes block, what one read takes) come from `lab buffers`.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
import time

from harness.machine.cost_model import PROFILES, StepCostProfile, calibrate_engine, decode_only
from harness.record.trace import Trace, metric_values, percentile
from harness.format.scenario import SCENARIOS_DIR
from harness.format.load import load
from harness.live.lab import measure_buffers
from harness.run import once
from harness.sim.backend import SimBackend

CALIBRATION_DIR = SCENARIOS_DIR / "calibration"
REPEATS = 3  # rounds of live runs (each calibration scenario once per round); the spread over rounds is kept
MAX_PERIOD_S = 0.05  # a longer period between two busy steps is the machine's noise, not serving cost


def buffer_terms(measured: dict) -> dict:
    """The profile's transport terms from `harness.live.lab.measure_buffers`: where the server's writes
    block, and what one read of a full receive buffer takes."""
    if not measured.get("median_accepted_bytes"):
        return {}
    return {"send_buffer_bytes": int(measured["median_accepted_bytes"]),
            "server_side_buffer_bytes": int(measured["server_side_bytes"] or 0),
            "read_window_bytes": measured["read_window_bytes"]}


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
        if decode_only(a) and (b["decoded"] or b["prefilled"]):
            period = b["began"] - a["began"]
            if period <= MAX_PERIOD_S:
                out.append((a, period))
    return out


MIN_STEPS_PER_SIZE = 20  # fewer decode steps of one batch size (the tail of a run) are not a measurement


def fit_serving(profile: StepCostProfile, traces: list[Trace]) -> tuple[list, int]:
    """([[events, seconds], ...], samples): per batch size, the mean live period of a decode
    step minus the engine's cost for it. The mean, not the median: a stream's completion is a sum
    of periods, and under a CPU quota (a slower machine, `scripts/dev slow`) one period in several
    holds a throttling pause that the median never sees (at a 0.5 quota of this machine the median
    period stayed put while live completions took 2x as long)."""
    extra: dict[int, list[float]] = {}
    for trace in traces:
        for step, period in _decode_steps(trace):
            b = step["decoded"]
            extra.setdefault(b, []).append(period - profile.engine_time(b, decode_context=step.get("decode_context")))
    sizes = [b for b in sorted(extra) if len(extra[b]) >= MIN_STEPS_PER_SIZE]
    if len(sizes) < 2:
        raise RuntimeError("calibration runs gave decode steps of one size only: cannot fit how serving grows")
    return [[0, 0.0]] + [[b, round(statistics.fmean(extra[b]), 7)] for b in sizes], sum(map(len, extra.values()))


def head_span(trace: Trace) -> tuple[float, int]:
    """From a burst's first send to its last response head, and how many heads."""
    sent = min(s.sent_at for s in trace.streams if s.sent_at is not None)
    heads = [s.head_at for s in trace.streams if s.head_at is not None]
    return max(heads) - sent, len(heads)


def fit_per_request(profile: StepCostProfile, live: dict[str, list[Trace]], scenarios: dict,
                    passes: int = 2, term: str = "per_request_s") -> tuple[float, int]:
    """Core time per request in a burst, chosen so that each burst's simulated head span (first
    send to last response head) matches its live one: per pass, the median over the runs of
    (live span - simulated span) / heads is added to the term. The live span is not all requests'
    work: the first requests' prefill and decode steps run inside it, on the same core, and the
    simulation charges those steps itself. Read as span / heads (how it was fitted before), the
    steps were counted twice and the simulated bursts' first tokens came late: live/sim TTFT
    0.73-0.93 on the calibration's own bursts of 4 to 32 (0.88-1.02 fitted this way), 0.54-0.65
    for the readers of the disconnect files in a suite run. Starts from the profile's own
    per_request_s. With `term` refused_request_s, a burst of refusals is fitted the same way."""

    measured = [(name, *head_span(t)) for name, ts in live.items() for t in ts]  # (scenario, span, heads)
    value = getattr(profile, term) or 0.0
    for _ in range(passes):
        at = SimBackend(dataclasses.replace(profile, **{term: value}))
        simulated = {name: head_span(once.run_trace(scenarios[name], at)[0])[0] for name in live}
        value = max(0.0, value + statistics.median((span - simulated[name]) / n for name, span, n in measured))
    return value, sum(n for _, _, n in measured)


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
            each = [v for t in traces if (v := percentile(metric_values(t.streams, metric), 50)) is not None]
            lv = statistics.median(each) if each else None
            if s and lv:
                out[f"{name} {metric}"] = round(lv / s, 3)
        if name == REFUSED:  # no tokens: its heads are what was fitted
            out[f"{name} head_span_s"] = round(statistics.median(head_span(t)[0] for t in traces)
                                               / head_span(sim[name])[0], 3)
    return out


def fit_terms(profile: StepCostProfile, live: dict[str, list[Trace]], scenarios: dict,
              solo) -> tuple[StepCostProfile, dict]:
    """The serving terms from one set of live runs of `scenarios` (by name): (profile with them,
    sample counts)."""

    plain = {name: ts for name, ts in live.items() if name not in (PADDED, UNREAD, REFUSED)}
    serving, n_steps = fit_serving(profile, [t for ts in plain.values() for t in ts])
    profile = dataclasses.replace(profile, serving_s=serving, per_request_s=0.0, request_latency_s=0.0)
    bursts = {name: ts for name, ts in plain.items() if name != solo.name}
    per_request, n_heads = fit_per_request(profile, bursts, scenarios)
    profile = dataclasses.replace(profile, per_request_s=per_request)
    profile, n_padded = fit_bytes(profile, live, scenarios)
    diffs = ttft_differences(live[solo.name], once.run_trace(solo, SimBackend(profile))[0])
    profile = dataclasses.replace(profile, request_latency_s=max(0.0, statistics.median(diffs)))
    # Once more with the wake-up a burst's first request pays at an idle server, now fitted.
    profile = dataclasses.replace(profile, per_request_s=fit_per_request(profile, bursts, scenarios, passes=1)[0])
    n_refused = 0
    if live.get(REFUSED) and REFUSED in scenarios:  # from per_request_s, with the wake-up fitted
        refused, n_refused = fit_per_request(dataclasses.replace(profile, refused_request_s=profile.per_request_s),
                                             {REFUSED: live[REFUSED]}, scenarios, term="refused_request_s")
        profile = dataclasses.replace(profile, refused_request_s=refused)
    return profile, {"decode_steps": n_steps, "burst_heads": n_heads, "lone_requests": len(diffs),
                     "padded_streams": n_padded, "refused_heads": n_refused}


PADDED = "cal_padded"  # its events carry padding, read at once: with UNREAD, it fits the per-byte terms
UNREAD = "cal_unread"  # padded events written while their clients do not read: the server's write alone
REFUSED = "cal_refused"  # a burst of bad requests: a refusal's core time (refused_request_s)


def fit_bytes(profile: StepCostProfile, live: dict[str, list[Trace]], scenarios: dict) -> tuple[StepCostProfile, int]:
    """(profile with serving_per_byte_s and client_per_byte_s, padded streams measured): the write's
    cost from cal_unread's readers, then the read's from cal_padded with the write's fixed. Without
    cal_unread (an older calibration set), both costs in serving_per_byte_s, as cal_padded reads them."""
    profile = dataclasses.replace(profile, serving_per_byte_s=0.0, client_per_byte_s=0.0)
    samples = 0
    if live.get(UNREAD) and UNREAD in scenarios:
        per_byte, n = fit_per_byte(profile, live[UNREAD], scenarios[UNREAD], "serving_per_byte_s", group="readers")
        profile, samples = dataclasses.replace(profile, serving_per_byte_s=per_byte), samples + n
        read_term = "client_per_byte_s"
    else:
        read_term = "serving_per_byte_s"
    if live.get(PADDED) and PADDED in scenarios:
        per_byte, n = fit_per_byte(profile, live[PADDED], scenarios[PADDED], read_term)
        profile, samples = dataclasses.replace(profile, **{read_term: per_byte}), samples + n
    return profile, samples


def fit_per_byte(profile: StepCostProfile, traces: list[Trace], scenario, term: str,
                 group: str | None = None) -> tuple[float, int]:
    """(seconds per byte, samples): the per-byte `term`, chosen so that the run's (or `group`'s)
    simulated completion p50 matches the live runs' median (by bisection; the step periods do not
    show it: the steps run on and the bytes queue behind them)."""

    if not traces:
        return 0.0, 0

    def measured(trace: Trace) -> list:
        return trace.group(group) if group else trace.streams

    def completion(trace: Trace) -> float:
        return percentile(metric_values(measured(trace), "completion_s"), 50)

    live = statistics.median(completion(t) for t in traces)

    def simulated(per_byte: float) -> float:
        return completion(once.run_trace(scenario, SimBackend(dataclasses.replace(profile, **{term: per_byte})))[0])

    samples = sum(len(measured(t)) for t in traces)
    if simulated(0.0) >= live:
        return 0.0, samples
    low, high = 0.0, 1e-9
    while simulated(high) < live and high < MAX_PER_BYTE_S:
        low, high = high, high * 4
    for _ in range(BISECTIONS):
        mid = (low + high) / 2
        low, high = (mid, high) if simulated(mid) < live else (low, mid)
    return (low + high) / 2, samples


MAX_PER_BYTE_S = 1e-6  # 1 s per MB: far past anything measured (0 to ~0.05 s per MB)
BISECTIONS = 8  # within 1/256 of the bracket, well inside the rounds' spread


def _ms_table(points: list) -> str:
    return ", ".join(f"{n}: {v * 1e3:.2f}" for n, v in points)


def _show(term: str, value) -> str:
    """A serving term as the calibration prints it: a table in ms, seconds as ms, per byte as ms per MB."""
    if isinstance(value, list):
        return _ms_table(value)
    return f"{value * 1e9:.2f} ms/MB" if term.endswith("per_byte_s") else f"{value * 1e3:.2f} ms"


def _rounded(value):
    return value if isinstance(value, list) else float(f"{value:.4g}")


SERVING_TERMS = ("serving_s", "serving_per_byte_s", "client_per_byte_s", "per_request_s", "refused_request_s",
                 "request_latency_s")


def calibrate(model: str, engine_only: bool = False, say=print, repeats: int = REPEATS,
              measure_transport: bool = True, each_round: bool = True) -> StepCostProfile:
    """The whole profile: engine terms in-process, transport terms (`lab buffers`), then the
    serving terms fitted on `repeats` rounds of live calibration runs together; with `each_round`,
    each term is also fitted on each round alone, and that spread is stored with it (a report
    for the committed profile: it costs as many simulations again as the fit itself, and
    nothing judges by it)."""
    import asyncio


    engine = calibrate_engine(model)
    path = PROFILES / f"{model}.json"
    old = json.loads(path.read_text()) if path.exists() else {}  # an older profile's terms may differ
    keep = {"send_buffer_bytes", "server_side_buffer_bytes", "read_window_bytes"} | (
        {*SERVING_TERMS, "calibration"} if engine_only else set())
    profile = dataclasses.replace(engine, **{k: old[k] for k in keep if k in old})
    say(f"engine terms (in-process): decode {engine.decode_s}, "
        f"per prefill {engine.prefill_fixed_s * 1e3:.3f} ms, per prompt token {engine.prefill_per_token_s * 1e6:.2f} us")
    if engine_only:
        return profile
    if measure_transport:
        profile = dataclasses.replace(profile, **buffer_terms(asyncio.run(measure_buffers(model, repetitions=1))))
        say(f"transport terms (live): writes block at {profile.send_buffer_bytes} unread bytes, "
            f"one read of a full receive buffer {profile.read_window_bytes}")
    scenarios = calibration_scenarios(model)
    solo = next(s for s in scenarios if s.name == "cal_solo")
    rounds: list[dict[str, list[Trace]]] = []
    started, total = time.monotonic(), repeats * len(scenarios)
    for i in range(repeats):
        rounds.append({})
        for scenario in scenarios:
            trace, _ = once.run_live(scenario)
            rounds[-1][scenario.name] = [trace]
            done = i * len(scenarios) + len(rounds[-1])
            spent = time.monotonic() - started
            say(f"fit: round {i + 1}/{repeats} live {scenario.name}: {len(trace.steps)} steps, {trace.wall_s:.1f}s "
                f"({done}/{total} runs, {spent:.0f} s, about {spent / done * (total - done):.0f} s left)")
    live = {s.name: [r[s.name][0] for r in rounds] for s in scenarios}
    by_name = {s.name: s for s in scenarios}
    by_round = each_round and repeats > 1
    say(f"fit: the serving terms from the {total} runs{', each term also round by round' if by_round else ''} "
        f"(simulations of the runs; about {'as long again as' if by_round else 'half as long as'} the runs took)")
    profile, counts = fit_terms(profile, live, by_name, solo)
    each = [fit_terms(profile, r, by_name, solo)[0] for r in rounds] if by_round else []
    spread = {term: [_rounded(getattr(p, term)) for p in each] for term in SERVING_TERMS}
    sims = {s.name: once.run_trace(s, SimBackend(profile))[0] for s in scenarios}
    fit = residuals(live, sims)
    profile = dataclasses.replace(profile, calibration={
        "scenarios": [s.name for s in scenarios], "rounds": repeats, **counts,
        "terms_fitted_on_each_round": spread, "live_over_sim_p50": fit})
    say(f"serving terms (live, {repeats} rounds together): a step's events -> ms beyond the engine "
        f"{_show('serving_s', profile.serving_s)}, per request {_show('per_request_s', profile.per_request_s)}, "
        f"per refusal {_show('refused_request_s', profile.refused_request_s or 0.0)}, "
        f"lone request latency {_show('request_latency_s', profile.request_latency_s)}, "
        f"written to clients {_show('serving_per_byte_s', profile.serving_per_byte_s)}, "
        f"read by clients {_show('client_per_byte_s', profile.client_per_byte_s)}")
    for term, values in spread.items():
        if values:
            say(f"  {term} fitted on each round alone: " + "; ".join(_show(term, v) for v in values))
    say(f"fit, live/sim p50 on the calibration runs: {fit}")
    return profile
