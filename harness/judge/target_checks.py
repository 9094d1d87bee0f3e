"""The checks on a target, read from outside (harness.targets.watch records what they read): its
health, its load gauges for leaks and release times, its capacity before and after the run.
Registered by name (harness.judge.registry.implements) beside our own server's checks."""

from __future__ import annotations

from harness.record.verdict import CheckResult
from harness.record.trace import Trace
from harness.format.scenario import Scenario
from harness.judge.registry import implements
from harness.judge.bounds import CAPACITY




@implements("healthy", outside=True)
def target_healthy(scenario: Scenario | None, trace: Trace, solo: dict | None = None) -> CheckResult:
    """Outside our books: the target still answers its health route after the run."""
    health = trace.target["health_after"]
    return CheckResult("healthy", bool(health), f"health route after the run: {'ok' if health else 'failing'}",
                       "the target stays healthy", [] if health else ["the target is not healthy after the run"])


@implements("leak_free", outside=True)
def leak_free_by_gauges(scenario: Scenario | None, trace: Trace, solo: dict | None = None) -> CheckResult:
    """The target's own gauges read idle after the run drained: nothing running, waiting or cached."""
    final = trace.target["final"]
    if final is None:
        return CheckResult("leak_free", False, "gauges unreadable after the run", "running, waiting, cache 0",
                           [trace.target.get("settle_note") or "no reading"])
    shown = {k: v for k, v in final.items() if v is not None}
    idle_at = (trace.target.get("gauges") or {}).get("idle") or {}
    held = {k: v for k, v in shown.items() if v > idle_at.get(k, 0.0)}
    at = ", ".join(f"{k} <= {v:g}" for k, v in idle_at.items())
    return CheckResult("leak_free", not held, ", ".join(f"{k} {v:g}" for k, v in shown.items()),
                       "every gauge the profile maps reads idle after the run drains" + (f" ({at})" if at else " (0)"),
                       [f"{k} still {v:g}" for k, v in held.items()])


@implements("release_within", outside=True)
def release_by_gauges(scenario: Scenario | None, trace: Trace, solo: dict | None = None) -> CheckResult:
    """After each early close, the first poll at which the target's running + waiting is no more
    than the streams its clients still hold open: that close's release time, to one poll."""
    bound = scenario.expect.release_within
    poll = trace.target["poll_s"]
    samples = [(t, (r or 0) + (w or 0)) for t, r, w, _ in trace.target["samples"] if r is not None]
    streams = [s for s in trace.streams if s.sent_at is not None and s.status in (None, 200)]

    def open_at(t: float) -> int:
        return sum(1 for s in streams if s.sent_at <= t and (s.closed_at or s.ended_at or float("inf")) > t)

    delays, problems = [], []
    for s in trace.streams:
        if not s.left_early:
            continue
        when = next((t for t, active in samples if t >= s.closed_at and active <= open_at(t)), None)
        if when is None:
            problems.append(f"{s.group}#{s.index}: still counted running when the polls ended")
            continue
        delays.append(when - s.closed_at)
        if when - s.closed_at > bound.seconds + poll:
            problems.append(f"{s.group}#{s.index}: released {(when - s.closed_at) * 1e3:.0f}ms after its close")
    figure = (f"{len(delays)} early closes timed by polling 'running' every {poll * 1e3:.0f}ms; max "
              f"{max(delays, default=0.0) * 1e3:.0f}ms after the client's close (steps not observable)")
    if not any(s.left_early for s in trace.streams):
        problems.append("no stream left early")
    return CheckResult("release_within", not problems, figure,
                       f"<= {bound.seconds * 1e3:g}ms + one poll ({poll * 1e3:.0f}ms)", problems)


@implements("capacity_restored")
def capacity_restored(scenario: Scenario | None, trace: Trace, solo: dict | None = None) -> CheckResult:
    """Any target: N short requests at once before the run and after it drained; a server that
    leaked slots or cache serves the second probe slower, or not at all."""
    before, after = trace.target["probe_before"], trace.target["probe_after"]
    problems = []
    if after["completed"] < after["clients"]:
        problems.append(f"after the run only {after['completed']}/{after['clients']} probe requests completed")
    b, a = before["ttft_p50_s"], after["ttft_p50_s"]
    if b is None or a is None:
        problems.append("a probe had no first tokens to time")
    elif a > CAPACITY.limit(b):
        problems.append(f"probe TTFT p50 {a * 1e3:.0f}ms after, {b * 1e3:.0f}ms before")
    figure = (f"{after['clients']} probe requests: TTFT p50 before {_ms(b)}, after {_ms(a)}; "
              f"completed {before['completed']}/{before['clients']} before, {after['completed']}/{after['clients']} after")
    return CheckResult("capacity_restored", not problems, figure,
                       f"all complete, after <= {CAPACITY} before", problems)


def _ms(value: float | None) -> str:
    return "none" if value is None else f"{value * 1e3:.0f}ms"


@implements("waste", outside=True)
def waste_by_counter(scenario: Scenario | None, trace: Trace, solo: dict | None = None) -> CheckResult:
    """From outside, per request is not shown, only the run's total: the target's tokens-generated
    counter over the run (read after the capacity probe before it, and after the run drained,
    before the probe after it), less what the streams that did not leave were given (their usage,
    else the tokens they read), over what the abandoned streams read."""
    bound = scenario.expect.waste
    generated = trace.target.get("generated_tokens")
    if generated is None:
        return CheckResult("waste", False, "tokens generated: the counter gave no reading",
                           f"<= {bound:g}", [trace.target.get("counter_note") or "no reading"])
    left = [s for s in trace.streams if s.left_early]
    stayed = sum((s.usage or {}).get("completion_tokens") or len(s.token_times)
                 for s in trace.streams if not s.left_early)
    read = sum(len(s.token_times) for s in left)
    abandoned = generated - stayed
    ratio = abandoned / max(read, 1)
    return CheckResult("waste", bool(left) and ratio <= bound,
                       f"{ratio:.2f} tokens generated per token read over {len(left)} abandoned streams "
                       f"({abandoned:g}/{read}: the counter's {generated:g} less {stayed} for the streams that stayed)",
                       f"<= {bound:g}", [] if left else ["no stream left early"])


# A stream's outcome (harness.record.trace.StreamRecord.outcome) as the profile's finished
# counters name it; any other end of an accepted stream (an error event, a drop) is "error".
AS_COUNTED = {"length": "length", "stop": "stop", "eos": "stop", "client_left": "client_left"}


def finished_once(scenario: Scenario | None, trace: Trace, solo: dict | None = None) -> CheckResult:
    """The target's own count of the requests it finished, by reason, over the run (read as
    waste's counter is), against what its clients read: a request counted twice, or never, or
    with an end its client did not see. `length` and `stop` at least as many as the clients read
    (a client may leave after the server finished); the total equal to the streams it accepted
    where every reason is counted and the gauges read idle first (else a late count is not a
    miss)."""
    counts = trace.target.get("finished")
    bound = "server length, stop >= clients'; total = accepted where every reason is counted"
    if not counts:  # the profile names them, the server does not export them (or could not be read)
        why = trace.target.get("counter_note") or "its /metrics has none of the profile's finished-requests series"
        return CheckResult("finished_once", None, f"not observable: {why}", bound, [why], compared=0)
    accepted = [s for s in trace.streams if s.status == 200 and s.outcome != "incomplete"]
    clients: dict[str, int] = {}
    for s in accepted:
        reason = AS_COUNTED.get(s.outcome, "error")
        clients[reason] = clients.get(reason, 0) + 1
    problems, compared = [], 0
    for reason in ("length", "stop"):
        if reason in counts:
            compared += 1
            if counts[reason] < clients.get(reason, 0):
                problems.append(f"the server counted {counts[reason]:g} finished by {reason}, its clients read "
                                f"{clients.get(reason, 0)}")
    whole = set(counts) >= {"length", "stop", "client_left", "error"}
    drained = trace.target.get("gauges") is not None and not trace.target.get("settle_note")
    total = sum(counts.values())
    if whole and drained:
        compared += 1
        if total != len(accepted):
            problems.append(f"the server counted {total:g} requests finished, its clients had {len(accepted)} accepted")
    shown = ", ".join(f"{k} {v:g}" for k, v in sorted(counts.items()))
    read = ", ".join(f"{k} {v}" for k, v in sorted(clients.items())) or "none"
    figure = (f"server counted {shown} (total {total:g}); its clients read {read} ({len(accepted)} accepted)"
              + ("" if whole and drained else "; total not compared: " +
                 ("not every reason is counted" if not whole else "the run was not seen to drain")))
    return CheckResult("finished_once", not problems, figure, bound, problems, compared=compared)


# The same reading on our own server run as a target (its books, and its counters through the
# streamlab profile).
implements("finished_once", outside=True)(finished_once)
implements("finished_once")(finished_once)
