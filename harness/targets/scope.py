"""What of a scenario another server can run: the groups whose expectations hold for any
OpenAI-compatible streaming server, and why the rest are left out. No sockets here.

A scenario is written for our own server: some of its groups expect what only `streamlab serve`
does (a slow reader dropped with `slow_client` under the drop policy, a stream resumed by its
Last-Event-ID, a refusal for a missing access key, a first-token deadline, an engine fault the
lab injects). Run against vLLM or llama-server, those groups would fail on our features, not on
the target's defects. So a run against another server (not our own on another route) keeps
every group a target can run and leaves out the rest, each with its reason in the run's notes;
a scenario with no such group, or one that is about our server itself (a negative control, a
lab fault), is not run there, with the reason.

A group a target can run: its clients read, sleep, drop (FIN or RST) or send a bad request any
server can refuse, and every outcome its expectations name is one any server gives (a stream
to its length or its end of text, a client's own close, a refusal, an incomplete stream).
"""

from __future__ import annotations

from harness.format.scenario import Scenario
from harness.format.target import Target
from streamlab.presets import PRESETS

# What any server can give a stream: the scenario's words (harness.judge.checks maps eos to stop).
PORTABLE_OUTCOMES = {"length", "eos", "stop", "client_left", "refused", "incomplete"}


def scenario_refused(scenario: Scenario, target: Target | None = None) -> str | None:
    """Why none of the scenario runs on another server (`target`, where known), or None."""
    if scenario.faults is not None:
        return "its engine faults are injected into our own engine (lab)"
    if scenario.expect.expect_failure:
        return (f"a negative control of our own server (it must fail {', '.join(scenario.expect.expect_failure)} "
                "there)")
    keep, why = runnable_groups(scenario, target)
    if not keep:
        return "no group a target can run: " + "; ".join(why)
    return None


def group_refused(scenario: Scenario, group, target: Target | None = None) -> str | None:
    """Why one group of the scenario does not run on another server, or None."""
    behaviour = group.behaviour
    model = (target.serves or scenario.server.model) if target is not None else None
    positions = PRESETS[model].shape.n_positions if model in PRESETS else None
    if positions is not None and group.longest_tokens() > positions:
        # vLLM serves stdlib-small (256 positions) for tiny (1024): it refuses such a request, as it should.
        return (f"{group.name}: asks for up to {group.longest_tokens()} tokens, past the {positions} "
                f"positions of {model}, which {target.name} serves")
    if behaviour.ours_only:
        return f"{group.name}: {behaviour.ours_only}"
    if group.request.ttft_deadline_ms is not None:
        return f"{group.name}: sends a first-token deadline (our server's deadline gate)"
    if group.request.response_class != "starlette":
        return f"{group.name}: asks for a lab response class"
    expected = set(scenario.expect.finish_reasons.get(group.name, {}))
    ours = sorted(expected - PORTABLE_OUTCOMES)
    if ours:
        return f"{group.name}: expects {', '.join(ours)} (our server's own outcome)"
    # Our server keeps a left stream's slot for its resume window; a stream expected cut off while
    # it waits behind that slot (proxy_idle_silent's waiter) is served at once where nothing is kept.
    if "incomplete" in expected and scenario.server.resume_window_s > 0:
        return f"{group.name}: expects incomplete behind a slot our server's resume window keeps"
    return None


def runnable_groups(scenario: Scenario, target: Target | None = None) -> tuple[list, list[str]]:
    """The groups another server can run, and why each other one is left out (a group that joins
    one left out goes with it)."""
    keep, why = [], []
    refused = {g.name: group_refused(scenario, g, target) for g in scenario.groups}
    for group in scenario.groups:
        reason = refused[group.name]
        anchor = group.arrival.group if group.arrival.kind == "join_while" else None
        if reason is None and anchor is not None and refused[anchor] is not None:
            reason = f"{group.name}: joins {anchor}, which is not run"
        if reason is None:
            keep.append(group)
        else:
            why.append(reason)
    return keep, why


def _bound_kept(bound, names: set[str]) -> bool:
    """A latency bound stays when its group stays, and so does its baseline group in this
    scenario (a baseline scenario's group is that scenario's, run on the same target)."""
    in_this = bound.baseline_group is None or bound.baseline_scenario is not None
    return bound.group in names and (in_this or bound.baseline_group in names)


def for_target(scenario: Scenario, target: Target | None = None) -> tuple[Scenario, list[str]]:
    """The scenario with only the groups another server can run, its expectations narrowed to
    them, and a note per group left out. Call scenario_refused first: some group must remain."""
    keep, why = runnable_groups(scenario, target)
    if not why:
        return scenario, []
    names = {g.name for g in keep}
    expect = scenario.expect
    vary = expect.outcomes_vary
    if vary is not None:
        vary = vary.model_copy(update={"groups": [g for g in vary.groups if g in names]}) if any(
            g in names for g in vary.groups) else None
    parity = expect.parity
    if parity is not None and parity.groups and not any(g in names for g in parity.groups):
        parity = None
    elif parity is not None and parity.groups:
        parity = parity.model_copy(update={"groups": [g for g in parity.groups if g in names]})
    # release_within asks that streams leave early: without a group that does, nothing is left to time.
    leaves = any(g.behaviour.leaves_early or "client_left" in expect.finish_reasons.get(g.name, {})
                 for g in keep)
    narrowed = expect.model_copy(update={
        "release_within": expect.release_within if leaves else None,
        "finish_reasons": {g: v for g, v in expect.finish_reasons.items() if g in names},
        "latency": [b for b in expect.latency if _bound_kept(b, names)],
        "goodput": {g: v for g, v in expect.goodput.items() if g in names},
        "outcomes_vary": vary, "parity": parity})
    data = scenario.model_dump(mode="json", exclude={"groups", "expect"})
    out = Scenario.model_validate({**data, "groups": [g.model_dump(mode="json") for g in keep],
                                   "expect": narrowed.model_dump(mode="json")})
    return out, [f"not run on this target: {w}" for w in why]
