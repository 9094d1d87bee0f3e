"""Pure invariants: (scenario, trace, solo runs, baselines) -> check results. Never waits."""

from __future__ import annotations

from harness.record.verdict import CheckResult
from harness.record.trace import LEFT_BEHIND, NORMAL_FINISHES, Trace, goodput, holds_nothing
from harness.format.arrivals import JoinWhile
from harness.format.scenario import Scenario
from harness.judge import target_checks  # noqa: F401  (registers the checks read from outside a target)
from harness.judge import wire_checks  # noqa: F401  (registers the checks on what a client reads)
from harness.judge.lateness import TIMING_DEPENDENT, behind
from harness.judge.registry import CHECKS, NATIVE, OUTSIDE, implements, settle, unobservable
from harness.format.profile import PROFILES, Profile


@implements("leak_free")
def leak_free(scenario: Scenario | None, trace: Trace, solo: dict | None = None) -> CheckResult:
    s = trace.server
    cached = f" (+{s['blocks_evictable']} cached, no owner)" if s.get("blocks_evictable") else ""
    figure = (f"free {s['blocks_free']}/{s['blocks_total']}{cached}, "
              + ", ".join(f"{k} {s[k]}" for k in LEFT_BEHIND))
    return CheckResult("leak_free", holds_nothing(trace), figure, "all blocks free or cached unowned, nothing left",
                       list(trace.invariants))


@implements("exactly_once")
def exactly_once(scenario: Scenario | None, trace: Trace, solo: dict | None = None) -> CheckResult:
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
    return CheckResult("exactly_once", not problems, figure, "every sequence released exactly once", problems,
                       compared=len(accepted))


@implements("identity")
def identity(scenario: Scenario | None, trace: Trace, solo: dict[int, list[int] | str]) -> CheckResult:
    """solo: stream position in trace.streams -> the same request run alone: its token ids, or its
    text where the target's API gives no ids (then the stream's text is compared)."""
    problems, compared = [], 0
    by_text = unrunnable = 0
    for i, s in enumerate(trace.streams):
        if i not in solo or not s.token_times:
            continue
        expected = solo[i]
        if expected is None:  # the target could not run this request alone: nothing to compare with
            unrunnable += 1
            continue
        complete = s.finish in NORMAL_FINISHES
        if isinstance(expected, str) or not s.token_ids:
            compared += 1
            by_text += 1
            text = expected if isinstance(expected, str) else None
            if text is None:
                problems.append(f"{s.group}#{s.index}: the stream carried no token ids to compare")
            elif (s.text != text) if complete else not text.startswith(s.text):
                k = next((j for j, (a, b) in enumerate(zip(text, s.text)) if a != b), min(len(text), len(s.text)))
                problems.append(f"{s.group}#{s.index} text differs from its solo run at character {k}")
            continue
        compared += 1
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
    how = f" ({by_text} by text: no token ids on this target)" if by_text else ""
    how += f"; {unrunnable} could not be run alone on the target, so not compared" if unrunnable else ""
    return CheckResult("identity", not problems,
                       f"{compared - len(problems)}/{compared} streams equal their solo run{how}",
                       "all (a prefix, for streams that ended early)", problems, compared=compared)


def _observed_outcome(s, behaviour, refusals: dict) -> str:
    expected = behaviour.expected_refusal(refusals)
    if s.status is not None and s.status >= 500:
        return f"server_error_{s.status}_{s.error_type}"  # a server failing is never an expected refusal
    if expected is not None and s.status is not None and s.status != 200:
        status, error = expected
        if s.status == status and (error is None or s.error_type == error):
            return "refused"
        return f"refused_{s.status}_{s.error_type}"
    return s.outcome


@implements("finish_reasons")
def finish_reasons(scenario: Scenario | None, trace: Trace, solo: dict | None = None) -> CheckResult:
    """Each group's outcomes. On an OpenAI API an end of text is `stop`, and a target's profile
    says what it answers to a bad request where that differs from the scenario's expectation."""
    problems, figures = [], []
    behaviours = {g.name: g.behaviour for g in scenario.groups}
    openai = trace.openai_api
    refusals = {k: tuple(v) for k, v in trace.target["refusals"].items()} if openai else {}
    for group in scenario.groups:
        streams = trace.group(group.name)
        got: dict[str, int] = {}
        for s in streams:
            key = _observed_outcome(s, behaviours[group.name], refusals)
            got[key] = got.get(key, 0) + 1
        figures.append(f"{group.name}: " + ", ".join(f"{k} {v}" for k, v in sorted(got.items())))
        want = scenario.expect.finish_reasons.get(group.name)
        vary = scenario.expect.outcomes_vary
        if vary is not None and group.name in vary.groups:
            stray = sorted(set(got) - set(vary.allowed))
            if stray:
                problems.append(f"{group.name}: {stray} not among {vary.allowed}")
            continue
        if want is not None and openai:
            merged: dict[str, int] = {}
            for k, v in want.items():
                merged["stop" if k == "eos" else k] = merged.get("stop" if k == "eos" else k, 0) + v
            want = merged
        if want is not None and dict(sorted(want.items())) != dict(sorted(got.items())):
            problems.append(f"{group.name}: expected {want}, got {got}")
        elif want is None and ("incomplete" in got or any(k.startswith(("refused_", "server_error")) for k in got)):
            problems.append(f"{group.name}: unexpected {got}")
    bound = "; ".join(f"{g}: {w}" for g, w in scenario.expect.finish_reasons.items()) or "no incomplete streams"
    return CheckResult("finish_reasons", not problems, "; ".join(figures), bound, problems)


@implements("goodput")
def goodput_check(scenario: Scenario | None, trace: Trace, solo: dict | None = None) -> CheckResult:
    """Each named group: at least this share of its requests met its SLO."""
    problems, figures, bounds = [], [], []
    for name, least in scenario.expect.goodput.items():
        slo = trace.spec.slos()[name]  # as resolved for this run (harness.run.capacity)
        g = goodput(trace.group(name), slo)
        figures.append(f"{name} {g['good']}/{g['requests']} met the SLO ({g['per_s']:.2f}/s)")
        bounds.append(f"{name} >= {least:.0%}")
        if g["fraction"] < least:
            problems.append(f"{name}: {g['fraction']:.0%} < {least:.0%}")
    return CheckResult("goodput", not problems, "; ".join(figures), "; ".join(bounds), problems)


@implements("engine_faults")
def engine_faults(scenario: Scenario | None, trace: Trace, solo: dict | None = None) -> CheckResult:
    """Injected engine faults were contained: at least one step failed, each stream either
    finished normally or got `internal_error`, and the server kept serving (no step loop failure)."""
    errors = trace.server.get("engine_step_errors", 0)
    hit = [s for s in trace.streams if s.finish == "internal_error"]
    odd = [f"{s.group}#{s.index}: {s.outcome}" for s in trace.streams
           if s.status == 200 and s.outcome not in (*NORMAL_FINISHES, "internal_error", "client_left")]
    problems = ([] if errors else ["no step failed: the fault was not injected"]) + odd
    if trace.failure:
        problems.append("the step loop broke instead of containing the fault")
    figure = f"{errors} failed step(s), {len(hit)} stream(s) ended with internal_error, server healthy: " \
             f"{trace.failure is None}"
    return CheckResult("engine_faults", not problems, figure, "faults contained: errors only for the streams in a "
                       "failed step, the rest served, the step loop alive", problems)


@implements("release_within")
def release_within(scenario: Scenario | None, trace: Trace, solo: dict | None = None) -> CheckResult:
    """Each early close is released within the bound; with resumption on, a stream that is not
    resumed waits the window first, so the time bound counts from the window's end."""
    bound = scenario.expect.release_within
    window = scenario.server.resume_window_s
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
            if delay > bound.seconds + window:
                problems.append(f"{s.group}#{s.index}: released {delay * 1e3:.1f}ms after the client closed")
    figure = (f"{len(steps_seen)} early closes; max {max(steps_seen, default=0)} steps, "
              f"max {max(delays, default=0.0) * 1e3:.1f}ms after the client's close")
    after = f" after the {window:g}s resume window" if window else ""
    return CheckResult("release_within", not problems and bool(steps_seen), figure,
                       f"<= {bound.steps} steps and {bound.seconds * 1e3:g}ms{after}",
                       problems or ([] if steps_seen else ["no stream left early"]))


@implements("resumption")
def resumption(scenario: Scenario | None, trace: Trace, solo: dict | None = None) -> CheckResult:
    """Reconnectors: every stream resumed at least once and finished, on one request id, with
    event ids 1..n read once each over all its connections (no event lost, none twice)."""
    reconnecting = {g.name for g in scenario.groups if g.behaviour.resumes}
    problems, resumed = [], 0
    streams = [s for s in trace.streams if s.group in reconnecting]
    for s in streams:
        who = f"{s.group}#{s.index}"
        rids = {e.rpartition(":")[0] for e in s.event_ids}
        numbers = [int(e.rpartition(":")[2]) for e in s.event_ids if e.rpartition(":")[2].isdigit()]
        resumed += sum(1 for st in s.resumes if st == 200)
        if 200 not in s.resumes:
            # Its fault or its own leaving never came while it streamed: the run proved nothing
            # about resumption (a fault 0.3 s in missed 200-token streams that took 0.27 s).
            problems.append(f"{who}: never resumed ({len(s.cuts)} cuts, resumes {s.resumes})")
        elif s.failure or s.finish is None:
            problems.append(f"{who}: {s.failure or 'never finished'} (resumes {s.resumes})")
        elif len(rids) != 1 or (s.request_id and rids != {s.request_id}):
            problems.append(f"{who}: event ids from {sorted(rids)}")
        elif numbers != list(range(1, len(numbers) + 1)):
            dup = len(numbers) - len(set(numbers))
            problems.append(f"{who}: event numbers not 1..{max(numbers, default=0)} once each "
                            f"({dup} repeated, {max(numbers, default=0) - len(set(numbers))} missing)")
    cuts = sum(len(s.cuts) for s in streams)
    return CheckResult("resumption", bool(streams) and not problems,
                       f"{len(streams)} reconnecting streams, {cuts} cuts, {resumed} resumes",
                       "each resumed (at least once) and finished; event ids 1..n once each; one request id", problems)


@implements("arrivals")
def arrivals(scenario: Scenario | None, trace: Trace, solo: dict | None = None) -> CheckResult:
    """join_while groups: each client was sent while the group it joins still ran. A joiner that
    came after the group ended proves nothing about joining a running batch (its latency bound
    then passes trivially), which a faster machine would otherwise turn into a silent pass."""
    problems, figures = [], []
    for g in scenario.groups:
        if not isinstance(g.arrival, JoinWhile):
            continue
        ends = [s.stopped_at for s in trace.group(g.arrival.group)]
        until = max((e for e in ends if e is not None), default=None)
        joiners = trace.group(g.name)
        late = [s for s in joiners if s.sent_at is None or until is None or s.sent_at >= until]
        figures.append(f"{g.name}: {len(joiners) - len(late)}/{len(joiners)} sent while {g.arrival.group} ran"
                       + (f" (until {until:.3f}s)" if until is not None else ""))
        if late:
            problems.append(f"{g.name}: {len(late)} sent after {g.arrival.group} ended")
    return CheckResult("arrivals", not problems, "; ".join(figures),
                       "every join_while client is sent while the group it joins runs", problems)


@implements("waste")
def waste(scenario: Scenario | None, trace: Trace, solo: dict | None = None) -> CheckResult:
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


def traced_profile(target: dict) -> Profile:
    """The profile a target run was observed with, as its trace keeps it (a name in older traces)."""
    kept = target["profile"]
    return PROFILES[kept] if isinstance(kept, str) else Profile.model_validate(kept)


def run_checks(scenario: Scenario, trace: Trace, solo: dict[int, list[int] | str],
               timed: list[CheckResult] = ()) -> list[CheckResult]:
    """Every declared check that applies (harness.judge.registry), in its order; `timed`: the timing
    verdicts (harness.judge.timing.judge), which need this session's other runs. Each result passes
    the registry's one rule (nothing compared is not observable) and its negative-control mark."""
    t = trace.target
    hidden = {} if t is None else unobservable(traced_profile(t))
    native = t is None or t["native_books"]  # our own books: every check observable
    timed_by_name = {r.name: r for r in timed}
    results = []
    for spec in CHECKS:
        if spec.timing:
            if spec.name in timed_by_name:
                results.append(timed_by_name.pop(spec.name))
            continue
        if not spec.applies(scenario) or (spec.targets_only and t is None):
            continue
        if spec.name in hidden:
            results.append(not_observable(spec.name, trace, hidden[spec.name]))
            continue
        run = NATIVE[spec.name] if native or spec.name not in OUTSIDE else OUTSIDE[spec.name]
        results.append(run(scenario, trace, solo))
    results += timed_by_name.values()
    late = behind(trace)
    if late:  # its own clock was not kept: what it timed is not a figure of the server
        results = [CheckResult(r.name, None, f"not observable: {late}", r.bound, [late], compared=0)
                   if r.name in TIMING_DEPENDENT else r for r in results]
    results = [settle(r, scenario.expect.expect_failure) for r in results]
    missing = set(scenario.expect.expect_failure) - {r.name for r in results}
    for name in sorted(missing):
        results.append(CheckResult(name, True, "check not configured", "must be configured to fail", [],
                                   expected_to_fail=True))
    return results


@implements("healthy")
def healthy(scenario: Scenario | None, trace: Trace, solo: dict | None = None) -> CheckResult:
    """Always on: the server's step loop never broke (its traceback is on the trace if it did)."""
    last = (trace.failure or "").strip().splitlines()[-1:] or ["none"]
    return CheckResult("healthy", trace.failure is None, f"step loop failure: {last[0]}",
                       "the step loop never fails", [trace.failure] if trace.failure else [])


# ---- a target's checks, from outside: harness/judge/target_checks.py ----

def not_observable(name: str, trace: Trace, why: str) -> CheckResult:
    return CheckResult(name, None, f"on target {trace.target['name']}: {why}", "not evaluated")
