"""harness/machine/pace.py: a live server's pace read from its step log. Parity is judged at the
pace the server stepped (the simulation again at that pace), counting busy steps only, keeping a
CPU quota's pauses as the fit keeps them, and taking the window that moved least.
"""

from __future__ import annotations

import copy

import pytest

from harness.run import once, runner
from harness.judge import timing
from harness.machine.pace import BUSY_GAP_S, PACED, PACE_MIN_STEPS, group_window, moved, pace, run_pace, step_pace
from harness.format.load import load_by_name
from harness.sim.backend import SimBackend
from tests.helpers import as_mode, client_trace


def test_parity_is_judged_at_the_pace_the_live_server_stepped(overlap_4):
    """A server whose every step took 1.6x what the profile says (the machine moved after the fit):
    against the simulation under the profile its completions read 1.6x and fail parity; its step
    log says 1.6x, and the simulation at that pace agrees with it. A run at the profile's pace is
    not simulated again."""
    scenario, sim = overlap_4
    backend = SimBackend()
    profile = backend.profile(scenario.server.model)
    slow = once.run_trace(scenario, SimBackend(profile.steps_scaled(1.6)))[0]
    slow.mode = "live"
    k = pace(slow, sim, profile)
    assert k is not None and 1.5 < k < 1.7, k
    assert not timing.parity(scenario, [(slow, sim)]).passed
    paced = runner.RunContext().references.at_the_pace(scenario, slow, sim, backend)
    assert paced is not None and any(n.startswith(PACED) for n in paced.notes)
    assert timing.parity(scenario, [(slow, paced)]).passed
    steady = as_mode(copy.deepcopy(sim))
    assert pace(steady, sim, profile) == pytest.approx(1.0)
    assert runner.RunContext().references.at_the_pace(scenario, steady, sim, backend) is None


def test_the_pace_counts_busy_steps_only():
    """A wait for work between steps is the scenario's, not the server's pace, and so is a step far
    slower than the run's typical one; too few steps are not a pace."""
    profile = SimBackend().profile("tiny")
    step = {"decoded": 4, "prefilled": 0, "prompt_tokens": 0, "decode_context": 0, "events": 4}
    cost = profile.logged_cost(step)
    steps = [dict(step, began=i * 2 * cost, seconds=2 * cost) for i in range(PACE_MIN_STEPS + 1)]
    steps.append(dict(step, began=steps[-1]["began"] + 0.010, seconds=2 * cost))  # 8 ms waiting for work
    steps.append(dict(step, began=steps[-1]["began"] + 2 * cost, seconds=10 * cost))  # one the model misses
    steps.append(dict(step, began=steps[-1]["began"] + 10 * cost, seconds=2 * cost))
    trace = client_trace("steps", "live", [])
    trace.steps = steps
    k, n = step_pace(trace, profile)
    assert k == pytest.approx(2.0) and n == PACE_MIN_STEPS + 1  # all but the wait and the slow one
    trace.steps = steps[:PACE_MIN_STEPS]
    assert step_pace(trace, profile) is None



def test_the_pace_keeps_a_cpu_quotas_pauses_as_the_fit_keeps_them():
    """Under a CPU quota one period in several holds a pause in which the step thread was ready but
    had no CPU (its run delay, the step log's cpu_waited_s). The loop was busy: the pause is kept in
    the pace as the fit's mean periods keep it, neither read as a wait for work nor as an outlier.
    Without the run delay the same periods are left out, and what is left reads faster."""
    profile = SimBackend().profile("tiny")
    step = {"decoded": 4, "prefilled": 0, "prompt_tokens": 0, "decode_context": 0, "events": 4}
    cost = profile.logged_cost(step)
    pause = 6 * cost  # a 0.25 quota's pause is several steps long
    assert pause > 2 * BUSY_GAP_S
    steps, at, waited = [], 0.0, 0.0
    for i in range(3 * PACE_MIN_STEPS):
        inside = pause if i % 4 == 1 else 0.0  # one step in four holds the pause...
        after = pause if i % 4 == 3 else 0.0  # ...and one gap in four
        steps.append(dict(step, began=at, seconds=cost + inside, cpu_waited_s=waited, cpu_waited_end_s=waited + inside))
        at, waited = at + cost + inside + after, waited + inside + after
    trace = client_trace("steps", "live", [])
    trace.steps = steps
    k, n = step_pace(trace, profile)
    assert n == len(steps) - 1 and k == pytest.approx(1 + 2 * pause / 4 / cost, rel=0.05), k  # 4.0: the mean period
    # A step that held a pause, then waits for work as long: the wait is the loop's, not the pause's.
    waiting = client_trace("steps", "live", [])
    waiting.steps = copy.deepcopy(steps)
    assert waiting.steps[21]["cpu_waited_end_s"] > waiting.steps[21]["cpu_waited_s"]
    for s in waiting.steps[22:]:
        s["began"] += pause
    assert step_pace(waiting, profile)[1] == n - 1
    for s in steps:
        s["cpu_waited_s"] = s["cpu_waited_end_s"] = 0.0
    k, _ = step_pace(trace, profile)
    assert k == pytest.approx(1.0), k  # unmeasured, the pauses read as waits for work or outliers and fell out

def test_a_run_is_paced_by_its_least_moved_window():
    """A server that stepped at the profile's pace while the healthy readers ran and 1.8x slower
    afterwards, through the slow reader's long tail (what a 0.5 quota did in CI): the whole run
    reads slower than the healthy group's window (1.0; the tail's busy steps are fewer than the
    healthy window's since their periods count the bytes written) and so does the slow group's,
    and the run's pace is the one nearest 1 (a slower machine slows every window; what the model
    misses only adds to some)."""
    scenario = load_by_name("slow_reader_pause_1")
    sim = once.simulate(scenario)[0]
    profile = SimBackend().profile(scenario.server.model)
    _, healthy_end = group_window(sim, "healthy")
    live = as_mode(copy.deepcopy(sim))
    shift = 0.0
    for a, b in zip(live.steps, live.steps[1:] + [None]):
        a["began"] += shift
        if a["began"] > healthy_end:  # after the healthy readers: every step 1.8x as long
            extra = 0.8 * ((b["began"] + shift - a["began"]) if b else a["seconds"])
            a["seconds"] *= 1.8
            shift += extra
    assert pace(live, sim, profile, "healthy") == pytest.approx(1.0, abs=0.05)
    whole, slow = pace(live, sim, profile), pace(live, sim, profile, "slow")
    assert whole is not None and whole > 1.1 and slow is not None and slow > 1.1
    k = run_pace(live, sim, profile, ["healthy", "slow"])
    assert k == pytest.approx(1.0, abs=0.05) and not moved(k)
    assert runner.RunContext().references.at_the_pace(scenario, live, sim, SimBackend()) is None
