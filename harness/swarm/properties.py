"""What the swarm asserts beyond the registry's checks: what the policies and the API promise
for any scenario, with no expectations written for it. Pure: (scenario, trace) -> results.

  ends         every admitted request a client waited for got its last event, and a reader's
               is a normal finish or an error the scenario allows (a fault, a deadline, a
               slow-client drop); never `cancelled` by no one it knows
  not_stalled  under every policy but naive, a reader on a clean network never waits more
               than STALL_BOUND_S between tokens, whatever the other clients do (simulation)
  let_go       a stream whose client left early is released within LET_GO_STEPS engine steps of
               the close reaching the server (after the resume window, if on), whatever ended
               it: the registry's
               release_within times only releases its close caused, so a sequence the close
               failed to cancel, which ran on to its length for nobody, passed it

What a stream's text, usage, event order and finish reason promise (stop strings included) the
registry's wire contract checks hold for every run, the swarm's draws among them
(harness/judge/wire_checks.py).
"""

from __future__ import annotations

from harness.format.scenario import Scenario
from harness.record.trace import NORMAL_FINISHES, Trace
from harness.record.verdict import CheckResult

# Virtual seconds on the simulation's profile. A tiny-model step is a few milliseconds there
# (a 12-prompt whole prefill about 50 ms), and every slow client the swarm draws holds its
# stream for 0.5 s or more (a sleeper's sleep, a stalled client's patience), so a reader held
# up by another's slowness, as under the naive policy, passes it, and a busy engine does not.
STALL_BOUND_S = 0.4


def _allowed_errors(scenario: Scenario, group) -> set[str]:
    allowed = set()
    if scenario.server.fault_step or scenario.server.fault_rate:
        allowed.add("internal_error")
    if scenario.server.admission == "deadline" and group.request.ttft_deadline_ms is not None:
        allowed.add("deadline_expired")
    slow = group.behaviour.may_be_dropped_slow or (
        group.network is not None and any(t.type == "bandwidth" for t in group.network.toxics))
    if slow and scenario.server.policy.value in ("drop", "pause_then_drop"):
        allowed.add("slow_client")
    return allowed


def ends(scenario: Scenario, trace: Trace) -> CheckResult:
    problems, counted = [], 0
    for group in scenario.groups:
        if not group.behaviour.waits_for_end:
            continue
        allowed = _allowed_errors(scenario, group)
        for s in trace.group(group.name):
            if s.status != 200:
                continue
            counted += 1
            if s.finish is None:
                problems.append(f"{group.name}#{s.index}: no last event ({s.failure or 'the client stopped waiting'})")
            elif s.finish not in NORMAL_FINISHES and s.finish not in allowed:
                problems.append(f"{group.name}#{s.index}: ended with {s.finish!r}; allowed "
                                f"{sorted(set(NORMAL_FINISHES) | allowed)}")
    return CheckResult("ends", not problems, f"{counted - len(problems)}/{counted} ended as allowed",
                       "every admitted request its client waited for ends, normally or as allowed", problems,
                       compared=counted)


def _slow_others(scenario: Scenario) -> bool:
    for g in scenario.groups:
        b = g.behaviour
        if b.slows_others or (
                g.network is not None and any(t.type == "bandwidth" for t in g.network.toxics)):
            return True
    return False


def not_stalled(scenario: Scenario, trace: Trace) -> CheckResult | None:
    if scenario.server.policy.value == "naive" or not _slow_others(scenario) or trace.mode != "sim":
        # live: a bound in seconds would be one machine's (a target's prefill alone can pass it)
        return None
    worst, problems, counted = 0.0, [], 0
    for group in scenario.groups:
        if not group.behaviour.reads_at_full_speed or group.network is not None:
            continue
        for s in trace.group(group.name):
            times = s.token_times
            if len(times) < 2:
                continue
            counted += 1
            gap = max(b - a for a, b in zip(times, times[1:]))
            worst = max(worst, gap)
            if gap > STALL_BOUND_S:
                problems.append(f"{group.name}#{s.index}: {gap * 1e3:.0f} ms between two tokens")
    if not counted:
        return None
    return CheckResult("not_stalled", not problems, f"longest gap {worst * 1e3:.0f} ms over {counted} readers",
                       f"<= {STALL_BOUND_S * 1e3:.0f} ms ({scenario.server.policy.value})", problems, compared=counted)


# A close is applied at the next step; one more for a close that lands while a step runs. In
# steps, not seconds: a tiny-model token takes about 1 ms of virtual time, so a whole 40-token
# stream that nobody cancelled would end inside any bound in seconds.
LET_GO_STEPS = 2


def let_go(scenario: Scenario, trace: Trace) -> CheckResult | None:
    by_request = trace.release_by_request()
    window = scenario.server.resume_window_s
    latency = {g.name: max((t.latency_ms for t in (g.network.toxics if g.network else []) if t.type == "latency"),
                           default=0) / 1000 for g in scenario.groups}
    began = sorted(step["began"] for step in trace.steps)
    problems, counted, worst = [], 0, 0
    for s in trace.streams:
        recs = by_request.get(s.request_id or "", [])
        if not s.left_early or s.closed_at is None or len(recs) != 1:
            continue  # stayed to the end; or exactly_once speaks for it
        counted += 1
        heard = s.closed_at + latency[s.group] + window  # the close reaches the server; its window ends
        steps = sum(1 for t in began if heard < t < recs[0]["released_at"])
        worst = max(worst, steps)
        if steps > LET_GO_STEPS:
            problems.append(f"{s.group}#{s.index}: released {steps} steps after its client left, "
                            f"by {recs[0]['reason']}")
    if not counted:
        return None
    return CheckResult("let_go", not problems, f"{counted} left early; latest released {worst} steps after",
                       f"<= {LET_GO_STEPS} steps (after the resume window, link latency)", problems, compared=counted)


def swarm_properties(scenario: Scenario, trace: Trace) -> list[CheckResult]:
    return [r for r in (ends(scenario, trace), not_stalled(scenario, trace), let_go(scenario, trace))
            if r is not None]
