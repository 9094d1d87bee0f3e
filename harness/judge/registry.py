"""Every check a run can get, declared once: its name, what it holds to, when it applies, and how
it is observed on a server that is not our own.

Read from here: the scenario schema's CheckName (so any check can be a negative control), the
dispatcher (harness/judge/checks.run_checks, which runs the implementations registered below by name),
what a target cannot show (unobservable, below) and the checks table in scenarios/README.md
(harness/scenario_docs.py; `streamlab scenario schema --write` writes it, a test fails when it is stale).

One rule for every check, applied in one place (`settle`): a check that compared nothing is not
observable, never passed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from harness.format import check_names
from harness.judge.bounds import DRIFT, LIVE_GATE, PARITY_COMPLETION, PARITY_TTFT, SIM_GATE
from harness.record.verdict import CheckResult

if TYPE_CHECKING:
    from harness.format.scenario import Scenario
    from harness.format.profile import Profile

# How a check is observed on a server whose books we cannot read (a target):
ON_TARGET = {
    "clients": "from what its clients read",
    "gauges": "through the target's load gauges",
    "health": "through the target's health route",
    "counters": "through the target's tokens-generated counter",
    "finish_counters": "through the target's finished-requests counters, by reason",
    "never": "not observable: it needs our server's own books",
}


@dataclass(frozen=True)
class CheckSpec:
    name: str
    holds_when: str  # the README's words
    applies: Callable[["Scenario"], bool]  # whether a scenario gets this check
    on_target: str  # a key of ON_TARGET
    timing: bool = False  # judged by harness/judge/timing.py, which needs this session's other runs
    targets_only: bool = False  # run only where live runs aim at a target
    why_not_on_target: str = ""  # for on_target "never": what the target does not show


def _always(scenario: "Scenario") -> bool:
    return True


def _has_resuming_clients(scenario: "Scenario") -> bool:
    return any(g.behaviour.resumes for g in scenario.groups)


def _has_arrival(kind: str) -> Callable[["Scenario"], bool]:
    return lambda scenario: any(g.arrival.kind == kind for g in scenario.groups)


# In the order a run reports them.
CHECKS: tuple[CheckSpec, ...] = (
    CheckSpec("finish_reasons", "each group's outcomes equal the expected counts", _always, "clients"),
    CheckSpec("healthy", "the server's step loop never broke (its traceback is on the trace if it did)",
              _always, "health"),
    CheckSpec("leak_free", "after the run drains: every block free, nothing reserved, waiting, running, paused "
              "or registered, no broken invariant", lambda s: s.expect.leak_free, "gauges"),
    CheckSpec("exactly_once", "every accepted request's sequence was released exactly once; no double-release "
              "attempt", lambda s: s.expect.exactly_once, "never",
              why_not_on_target="it does not report releases per request"),
    CheckSpec("identity", "every stream's token ids equal its own request run alone (a prefix, for a stream that "
              "ended early); a mismatch names the first divergent token", lambda s: s.expect.identity, "clients"),
    CheckSpec("text", "every stream's text is its token ids decoded (independently of the server), cut at the first "
              "stop string; a stream that ended early read a prefix of it, short by at most a held-back stop prefix "
              "and an unfinished character", _always, "clients"),
    CheckSpec("usage", "a finished stream's usage counts the tokens its client read and its prompt's tokens",
              _always, "clients"),
    CheckSpec("event_order", "token events carry indices 0..n-1 once each (where the API numbers them) and none "
              "comes after the end event", _always, "clients"),
    CheckSpec("finish_agrees", "a finish reason agrees with what was read: `length` after max tokens, `stop` at the "
              "token that completed the first stop string (or, on an OpenAI API, the end of text), `eos` on the "
              "end-of-text token, and no stop string in the text of a stream that ended otherwise", _always,
              "clients"),
    CheckSpec("goodput", "each group named in `expect.goodput` has at least that share of its requests within its "
              "`slo`", lambda s: bool(s.expect.goodput), "clients"),
    CheckSpec("engine_faults", "(a scenario with `faults`) at least one step failed, each stream finished normally "
              "or got `internal_error`, and the step loop never broke",
              lambda s: s.faults is not None and s.faults.engine_error is not None, "never",
              why_not_on_target="its faults are not ours to inject"),
    CheckSpec("release_within", "every sequence whose client left was released within `steps` engine steps of the "
              "close and `seconds` of the client's close", lambda s: s.expect.release_within is not None, "gauges"),
    CheckSpec("waste", "tokens generated per token read over the abandoned streams is at most the bound",
              lambda s: s.expect.waste is not None, "counters",
              why_not_on_target="from the run's total: what the streams that did not leave read is taken off"),
    CheckSpec("finished_once", "(a target) the server's own finished-requests counters over the run: at least as "
              "many `length` and `stop` as its clients read, and, where every reason is counted and the run "
              "drained, each request its clients saw accepted counted once in all", _always, "finish_counters",
              targets_only=True),
    CheckSpec("resumption", "(a group of reconnectors) every reconnector resumed at least once (a fault that "
              "missed it proves nothing) and finished on one request id, with event numbers 1..n read once each",
              _has_resuming_clients, "clients"),
    CheckSpec("arrivals", "(a `join_while` group) every client was sent while the group it joins still ran, so "
              "its bounds were measured against a running batch", _has_arrival("join_while"), "clients"),
    CheckSpec("capacity_restored", "(a target) N short requests at once after the run complete as they did "
              "before it (N = `max_batch`)", _always, "clients", targets_only=True),
    CheckSpec("profile_drift", "the engine's decode step alone, paired burst by burst with a yardstick that runs "
              f"none of its code, is at most {DRIFT:g}x what it was when the profile was made", _always, "never",
              timing=True, why_not_on_target="it cannot time its engine alone (streamlab's GET /debug/engine-speed)"),
    CheckSpec("latency", "each bound: the group's `ttft_s`, `gap_s` or `completion_s` at `percentile` is at most "
              "`max_s`, or at most `max_ratio` times the same figure of `baseline_group` (in this scenario, or in "
              "`baseline_scenario`)", lambda s: bool(s.expect.latency), "clients", timing=True),
    CheckSpec("regression", "each group's TTFT and completion p50 within the gate over `scenarios/baselines.json` "
              f"(simulated: {SIM_GATE}; live: {LIVE_GATE} over the committed live/sim ratio "
              "times this machine's simulated figure)", _always, "clients", timing=True),
    CheckSpec("parity", "(live) outcomes, token ids and releases equal the simulation's, and each group's TTFT "
              f"and completion (interquartile means) within {PARITY_TTFT[0]:g}-{PARITY_TTFT[1]:g}x and "
              f"{PARITY_COMPLETION[0]:g}-{PARITY_COMPLETION[1]:g}x of it, at the live run's pace "
              "(`expect.parity` widens a group's, with a reason)", _always, "clients", timing=True),
)

BY_NAME = {c.name: c for c in CHECKS}
NAMES = tuple(BY_NAME)
# The format's list of names (below the judge) is this one: a check declared here and not there,
# or in another order, stops every import.
if NAMES != check_names.NAMES:
    raise RuntimeError(f"harness/format/check_names.py lists {check_names.NAMES}, the registry declares {NAMES}")

# name -> the function that runs it on our own server's books; and where a target is read from
# outside instead (its gauges or health route), that implementation. Registered by harness/judge/checks.py.
Implementation = Callable[["Scenario", object, dict], CheckResult]
NATIVE: dict[str, Implementation] = {}
OUTSIDE: dict[str, Implementation] = {}


def implements(name: str, outside: bool = False) -> Callable[[Implementation], Implementation]:
    if name not in BY_NAME:
        raise KeyError(f"{name} is not a declared check (harness/judge/registry.py)")
    table = OUTSIDE if outside else NATIVE

    def register(fn: Implementation) -> Implementation:
        table[name] = fn
        return fn
    return register


def unobservable(profile: "Profile") -> dict[str, str]:
    """check -> why it cannot be observed on a server with this profile (absent: it can)."""
    if profile.native_books:
        return {}
    out = {c.name: c.why_not_on_target for c in CHECKS if c.on_target == "never"}
    if profile.gauges is None:
        out |= {c.name: "no load gauges in its profile" for c in CHECKS if c.on_target == "gauges"}
    if profile.health_path is None:
        out |= {c.name: "no health route in its profile" for c in CHECKS if c.on_target == "health"}
    if profile.counters is None or not profile.counters.generated_tokens:
        out |= {c.name: "no tokens-generated counter in its profile" for c in CHECKS if c.on_target == "counters"}
    if profile.counters is None or not profile.counters.finished:
        out |= {c.name: "no finished-requests counters in its profile" for c in CHECKS
                if c.on_target == "finish_counters"}
    return out


def settle(result: CheckResult, negative_controls: list[str]) -> CheckResult:
    """The one rule every check's result passes through: nothing compared is not observable, never
    passed; and a check the scenario names in expect_failure is marked a negative control."""
    if result.passed and result.compared == 0:
        result = replace(result, passed=None, figure=f"nothing to compare: {result.figure}")
    result.expected_to_fail = result.name in negative_controls
    return result


def checks_table() -> str:
    """The checks table of scenarios/README.md."""
    rows = ["| check | holds when | on a target |", "|---|---|---|"]
    for c in CHECKS:
        where = ON_TARGET[c.on_target] + (f" ({c.why_not_on_target})" if c.why_not_on_target else "")
        rows.append(f"| `{c.name}` | {c.holds_when} | {where} |")
    return "\n".join(rows)
