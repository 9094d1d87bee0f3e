"""The server's pace during a live run, read from its step log against the cost model, and the
machine's own pauses in it (a quota's throttling, another process's time slice). Measurements,
not verdicts: harness.judge.timing and parity's paced simulation (harness.run.references) use them."""

from __future__ import annotations

import math
import statistics
from typing import TYPE_CHECKING

from harness.machine.cpu_quota import quota_pause_s
from harness.record.trace import Trace, metric_values

if TYPE_CHECKING:
    from harness.machine.cost_model import StepCostProfile


# ---- the server's pace during a live run ----

# The measurements that sized these: docs/HARNESS.md ("Every bound and what sized it").
MOVED = 1.15  # past this the run's pace is the machine, not a fit's per-round spread
BUSY_GAP_S = 0.001  # a busy loop begins its next step within this; waiting, it waits milliseconds or more
PACE_MIN_STEPS = 20  # fewer busy steps are not a pace
PACE_OUTLIER = 2.0  # a step over this x the run's median waited on the event loop's writes: left out
PACED = "paced"  # how a paced simulation's note begins


def machine_waits(a: dict, b: dict) -> tuple[float, float]:
    """The step thread's run delay (ready to run, no CPU: streamlab.hub.step_clock.CpuWait) in step
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
