"""Pure invariants: (scenario, trace, solo runs, baselines) -> check results. Never waits."""

from __future__ import annotations

from dataclasses import dataclass, field

from harness.report import Trace, metric_values, outcomes, percentile
from harness.scenario import PARITY_COMPLETION, PARITY_TTFT, BadRequest, Scenario


@dataclass
class CheckResult:
    name: str
    passed: bool
    figure: str
    bound: str
    details: list[str] = field(default_factory=list)
    expected_to_fail: bool = False

    @property
    def ok(self) -> bool:
        """A negative control is ok when its check fails."""
        return self.passed != self.expected_to_fail

    def line(self) -> str:
        verdict = "ok" if self.ok else "FAILED"
        control = " (negative control: must fail)" if self.expected_to_fail else ""
        detail = f" [{'; '.join(self.details[:3])}]" if self.details and not self.passed else ""
        return f"{self.name}{control}: {verdict}: {self.figure} (bound: {self.bound}){detail}"


def leak_free(trace: Trace) -> CheckResult:
    s = trace.server
    keys = ("blocks_reserved", "waiting", "running", "paused", "streams_registered")
    passed = s["blocks_free"] == s["blocks_total"] and all(s[k] == 0 for k in keys) and not trace.invariants
    figure = f"free {s['blocks_free']}/{s['blocks_total']}, " + ", ".join(f"{k} {s[k]}" for k in keys)
    return CheckResult("leak_free", passed, figure, "all blocks free, nothing left", list(trace.invariants))


def exactly_once(trace: Trace) -> CheckResult:
    by_request = trace.release_by_request()
    accepted = [s.request_id for s in trace.streams if s.status == 200 and s.request_id]
    problems = list(trace.ledger_problems)
    problems += [f"{rid} released {len(by_request.get(rid, []))}x" for rid in accepted
                 if len(by_request.get(rid, [])) != 1]
    doubles = trace.server.get("double_release_attempts", 0)
    if doubles:
        problems.append(f"{doubles} double-release attempt(s)")
    figure = f"{sum(1 for r in accepted if len(by_request.get(r, [])) == 1)}/{len(accepted)} released once, " \
             f"{doubles} double releases"
    return CheckResult("exactly_once", not problems, figure, "every sequence released exactly once", problems)


def identity(trace: Trace, solo: dict[int, list[int]]) -> CheckResult:
    """solo: stream position in trace.streams -> the same request's tokens run alone."""
    problems, compared = [], 0
    for i, s in enumerate(trace.streams):
        if i not in solo or not s.token_ids:
            continue
        compared += 1
        expected = solo[i]
        complete = s.finish in ("length", "eos", "stop")
        for k, (a, b) in enumerate(zip(expected, s.token_ids)):
            if a != b:
                problems.append(f"{s.group}#{s.index} first divergence at token {k}: solo {a}, stream {b}")
                break
        else:
            # The solo run goes one token past what the stream read, unless it ended there itself.
            solo_ended = len(expected) <= len(s.token_ids)
            if len(s.token_ids) > len(expected) or (complete and not solo_ended):
                problems.append(f"{s.group}#{s.index}: {len(s.token_ids)} tokens, solo "
                                f"{'ends at' if solo_ended else 'goes on past'} {len(expected)}")
    return CheckResult("identity", not problems, f"{compared - len(problems)}/{compared} streams equal their solo run",
                       "all (a prefix, for streams that ended early)", problems)


def _observed_outcome(s, behaviour) -> str:
    if isinstance(behaviour, BadRequest) and s.status is not None and s.status != 200:
        if s.status == behaviour.expect_status and s.error_type == behaviour.expect_error:
            return "refused"
        return f"refused_{s.status}_{s.error_type}"
    return s.outcome


def finish_reasons(scenario: Scenario, trace: Trace) -> CheckResult:
    problems, figures = [], []
    behaviours = {g.name: g.behaviour for g in scenario.groups}
    for group in scenario.groups:
        streams = trace.group(group.name)
        got: dict[str, int] = {}
        for s in streams:
            key = _observed_outcome(s, behaviours[group.name])
            got[key] = got.get(key, 0) + 1
        figures.append(f"{group.name}: " + ", ".join(f"{k} {v}" for k, v in sorted(got.items())))
        want = scenario.expect.finish_reasons.get(group.name)
        if want is not None and dict(sorted(want.items())) != dict(sorted(got.items())):
            problems.append(f"{group.name}: expected {want}, got {got}")
        elif want is None and ("incomplete" in got or any(k.startswith("refused_") for k in got)):
            problems.append(f"{group.name}: unexpected {got}")
    bound = "; ".join(f"{g}: {w}" for g, w in scenario.expect.finish_reasons.items()) or "no incomplete streams"
    return CheckResult("finish_reasons", not problems, "; ".join(figures), bound, problems)


def latency(scenario: Scenario, trace: Trace, baselines: dict[str, Trace]) -> CheckResult:
    problems, figures, bounds = [], [], []
    for b in scenario.expect.latency:
        value = percentile(metric_values(trace.group(b.group), b.metric), b.percentile)
        label = f"{b.group} {b.metric} p{b.percentile:g}"
        if value is None:
            problems.append(f"{label}: no samples")
            continue
        if b.max_s is not None:
            limit = b.max_s
            bounds.append(f"{label} <= {b.max_s:g}s")
        else:
            base_trace = baselines[b.baseline_scenario] if b.baseline_scenario else trace
            base_group = b.baseline_group or b.group  # in the baseline scenario, if one is named
            base = percentile(metric_values(base_trace.group(base_group), b.metric), b.percentile)
            if not base:
                problems.append(f"{label}: baseline {b.baseline_scenario or ''}{base_group} has no samples")
                continue
            limit = b.max_ratio * base
            bounds.append(f"{label} <= {b.max_ratio:g} x {b.baseline_scenario or 'group'} {base_group} "
                          f"({base * 1e3:.1f}ms)")
        figures.append(f"{label} {value * 1e3:.1f}ms")
        if value > limit:
            problems.append(f"{label} = {value * 1e3:.1f}ms > {limit * 1e3:.1f}ms")
    return CheckResult("latency", not problems, "; ".join(figures) or "none", "; ".join(bounds), problems)


def release_within(scenario: Scenario, trace: Trace) -> CheckResult:
    bound = scenario.expect.release_within
    by_request = trace.release_by_request()
    steps_seen, delays, problems = [], [], []
    for s in trace.streams:
        recs = by_request.get(s.request_id or "", [])
        if len(recs) != 1 or recs[0]["reason"] != "cancelled" or recs[0].get("closed_after_step") is None:
            continue
        rec = recs[0]
        steps = rec["release_step"] - rec["closed_after_step"]
        steps_seen.append(steps)
        if steps > bound.steps:
            problems.append(f"{s.group}#{s.index}: released {steps} steps after its close")
        if s.closed_at is not None:
            delay = rec["released_at"] - s.closed_at
            delays.append(delay)
            if delay > bound.seconds:
                problems.append(f"{s.group}#{s.index}: released {delay * 1e3:.1f}ms after the client closed")
    figure = (f"{len(steps_seen)} early closes; max {max(steps_seen, default=0)} steps, "
              f"max {max(delays, default=0.0) * 1e3:.1f}ms after the client's close")
    return CheckResult("release_within", not problems and bool(steps_seen), figure,
                       f"<= {bound.steps} steps and {bound.seconds * 1e3:g}ms",
                       problems or ([] if steps_seen else ["no stream left early"]))


def waste(scenario: Scenario, trace: Trace) -> CheckResult:
    by_request = trace.release_by_request()
    generated = read = n = 0
    for s in trace.streams:
        recs = by_request.get(s.request_id or "", [])
        if s.left_early and recs:
            n += 1
            generated += recs[0]["completion_tokens"]
            read += len(s.token_ids)
    ratio = generated / max(read, 1)
    return CheckResult("waste", n > 0 and ratio <= scenario.expect.waste,
                       f"{ratio:.2f} tokens generated per token read over {n} abandoned streams "
                       f"({generated}/{read})", f"<= {scenario.expect.waste:g}")


def run_checks(scenario: Scenario, trace: Trace, solo: dict[int, list[int]],
               baselines: dict[str, Trace] | None = None) -> list[CheckResult]:
    e = scenario.expect
    results = [finish_reasons(scenario, trace), healthy(trace)]
    if trace.mode == "sim":
        results.append(profile_drift(trace))
    if e.leak_free:
        results.append(leak_free(trace))
    if e.exactly_once:
        results.append(exactly_once(trace))
    if e.identity:
        results.append(identity(trace, solo))
    if e.latency:
        results.append(latency(scenario, trace, baselines or {}))
    if e.release_within is not None:
        results.append(release_within(scenario, trace))
    if e.waste is not None:
        results.append(waste(scenario, trace))
    for r in results:
        r.expected_to_fail = r.name in e.expect_failure
    missing = set(e.expect_failure) - {r.name for r in results}
    for name in sorted(missing):
        results.append(CheckResult(name, True, "check not configured", "must be configured to fail", [],
                                   expected_to_fail=True))
    return results


def healthy(trace: Trace) -> CheckResult:
    """Always on: the server's step loop never broke (its traceback is on the trace if it did)."""
    last = (trace.failure or "").strip().splitlines()[-1:] or ["none"]
    return CheckResult("healthy", trace.failure is None, f"step loop failure: {last[0]}",
                       "the step loop never fails", [trace.failure] if trace.failure else [])


def profile_drift(trace: Trace) -> CheckResult:
    """Always on in simulation: the real steps it ran took about what the profile says the engine takes."""
    from harness.simulation import Drift

    timing = trace.step_timing
    ratio = timing.get("real_over_profile_p50")
    if ratio is None:
        return CheckResult("profile_drift", True, f"{timing.get('steps_timed', 0)} steps timed: too few to judge",
                           f"real/profile step time p50 <= {Drift.FAIL:g}x")
    note = f" (warning: over {Drift.WARN:g}x; recalibrate with `streamlab scenario calibrate`)" \
        if ratio > Drift.WARN else ""
    return CheckResult("profile_drift", ratio <= Drift.FAIL,
                       f"real/profile step time p50 {ratio:.2f}x over {timing['steps_timed']} steps{note}",
                       f"<= {Drift.FAIL:g}x (profile measured on {timing.get('profile_machine') or 'unknown'})")


def parity(scenario: Scenario, live: Trace, sim: Trace, judge_timing: bool = True) -> CheckResult:
    """Live and simulation agree on outcomes, token ids and releases exactly, and on each group's
    TTFT and completion p50 within a ratio (the scenario may widen it for some groups, with a reason)."""
    problems, ratios = [], []
    wider = scenario.expect.parity
    for name in dict.fromkeys(s.group for s in sim.streams):
        got_live, got_sim = outcomes(live.group(name)), outcomes(sim.group(name))
        if got_live != got_sim:
            problems.append(f"{name}: live {got_live}, sim {got_sim}")
        for metric, lo, hi in timing_tolerance(scenario, name):
            r = timing_ratio(live, sim, name, metric)
            if r is None:
                continue
            ratios.append(f"{name} {metric} {r:.2f}x")
            if not lo <= r <= hi:
                if judge_timing:
                    problems.append(f"{name} {metric} p50 live/sim {r:.2f}x outside [{lo:g}, {hi:g}]")
                else:
                    ratios[-1] += f" (outside [{lo:g}, {hi:g}]: reported, not judged here)"
    for a, b in zip(live.streams, sim.streams):
        n = min(len(a.token_ids), len(b.token_ids))
        if a.token_ids[:n] != b.token_ids[:n]:
            problems.append(f"{a.group}#{a.index}: live and sim tokens differ")
    if len(live.releases) != len(sim.releases):
        problems.append(f"releases: live {len(live.releases)}, sim {len(sim.releases)}")
    if leak_free(live).passed != leak_free(sim).passed:
        problems.append("one mode leaked and the other did not")
    bound = (f"same outcomes, token ids, releases and leaks; p50 live/sim completion in "
             f"[{PARITY_COMPLETION[0]:g}, {PARITY_COMPLETION[1]:g}], TTFT in [{PARITY_TTFT[0]:g}, {PARITY_TTFT[1]:g}]")
    if wider:
        bound += f"; wider for {', '.join(wider.groups) or 'every group'}: {wider.reason}"
    return CheckResult("parity", not problems, "; ".join(ratios) or "no timings", bound, problems)


def timing_tolerance(scenario: Scenario, group: str) -> list[tuple[str, float, float]]:
    wider = scenario.expect.parity
    use = wider if wider and (not wider.groups or group in wider.groups) else None
    ttft = use.ttft if use else PARITY_TTFT
    completion = use.completion if use else PARITY_COMPLETION
    return [("ttft_s", *ttft), ("completion_s", *completion)]


def timing_ratio(live: Trace, sim: Trace, group: str, metric: str) -> float | None:
    lv = percentile(metric_values(live.group(group), metric), 50)
    sv = percentile(metric_values(sim.group(group), metric), 50)
    return lv / sv if lv and sv else None
