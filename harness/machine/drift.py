"""The engine's speed against the yardstick, read after a run on the run's own engine code
(harness.judge.timing.drift judges it against its bound, which the caller passes in)."""

from __future__ import annotations

import math
import statistics
import time
from typing import TYPE_CHECKING

from harness.machine.cores import server_threads

if TYPE_CHECKING:
    from harness.machine.cost_model import StepCostProfile


# ---- drift: the engine's real steps against the yardstick ----

READINGS = 3  # the engine and the yardstick are read again while their figure is past the bound, up to this many times
# ...and at least twice: one reading is 14 burst pairs in about a second, and one second of a
# shared machine can spoil it.
AT_LEAST = 2


def same_engine(mode: str, server) -> tuple:
    """What a run's engine speed depends on, from its scenario's server spec: all that
    streamlab.bench_step.engine_speed builds its engine from (model, decode attention, the lab's
    slowdown) and the threads a server gets (harness.machine.cores), per mode (EngineReadings' key)."""
    return mode, server.model, server.decode_attention, server.lab_step_slowdown, server_threads()


class EngineReadings:
    """The drift check's readings of one session's engines (harness.run.runner.RunContext owns one).

    A passing reading stands for the runs after it whose engine reads the same: the same mode,
    model, decode attention, lab slowdown and threads (all that streamlab.bench_step.engine_speed
    builds its engine from), against the same profile. A reading takes 3.4-3.7 s a live run and
    1.6 s a simulated one, and CI judges 62 of each. It is a paired ratio, so the machine's drift
    cancels in it; it is read again after KEEP_S all the same, and a failing one is never kept,
    so a slower engine (another key) or a doubtful reading is always read afresh. An engine
    changed by code (a test's monkeypatch, a sitecustomize) is a new session's: a new
    RunContext."""

    KEEP_S = 300.0

    def __init__(self, bound: float) -> None:
        self.bound = bound  # drift's bound (harness.judge.bounds.DRIFT): a reading past it is never kept
        self._kept: dict[tuple, tuple[float, dict]] = {}

    def measure(self, engine_speed, profile: "StepCostProfile", same_engine: tuple | None = None) -> dict:
        """measure_engine's reading; `same_engine`: what the engine's speed depends on (None: read
        afresh, keep nothing). A kept one comes back marked `reused_after_s`."""
        key = None if same_engine is None else (same_engine, profile.model, profile.machine,
                                                repr(sorted((profile.reference_s or {}).get("pairs", {}).items())))
        kept = self._kept.get(key) if key is not None else None
        if kept is not None and time.monotonic() - kept[0] < self.KEEP_S:
            return {**kept[1], "reused_after_s": round(time.monotonic() - kept[0], 1)}
        best = measure_engine(engine_speed, profile, self.bound)
        if key is not None and best["engine_slowdown"] is not None and best["engine_slowdown"] <= self.bound:
            self._kept[key] = (time.monotonic(), best)
        return best


def measure_engine(engine_speed, profile: "StepCostProfile", bound: float) -> dict:
    """The drift check's readings for one run. engine_speed() is streamlab.bench_step.engine_speed
    on the run's engine code: our engine's decode bursts, each paired with a burst of the yardstick
    at the same shape. It is read AT_LEAST times, and again while past `bound`, at most READINGS
    times; the lowest figure is kept. Each figure is already a median over pairs timed a few
    milliseconds apart, so a moment of the machine moves both sides of a pair, and a slower
    engine reads slow in every pair."""
    best: dict | None = None
    for i in range(READINGS):
        t = step_timing(engine_speed(), profile)
        t["readings"] = i + 1
        if best is None or (t["engine_slowdown"] or math.inf) < (best["engine_slowdown"] or math.inf):
            best = {**t}
        best["readings"] = i + 1
        if best["engine_slowdown"] is None or (i + 1 >= AT_LEAST and best["engine_slowdown"] <= bound):
            break
    return best


def _geomean(values) -> float | None:
    values = [v for v in values if v and v > 0]
    return math.exp(statistics.fmean(math.log(v) for v in values)) if values else None


def step_timing(speed: dict, profile: "StepCostProfile") -> dict:
    """What a backend records for the drift check from one engine_speed() reading: the paired
    engine/yardstick ratio over the same ratio when the profile was made (its `reference_s`
    pairs, or for an older profile its engine term over the yardstick's time), judged; the engine over the profile's engine term
    and the yardstick over its own reference, reported."""
    then = (profile.reference_s or {}).get("decode_s") or {}
    pairs = (profile.reference_s or {}).get("pairs") or {}
    batches = [b for b in speed["decode_s"] if profile.decode_cost(int(b)) > 0 and then.get(b)]
    if pairs:  # the same paired reading when the profile was made (harness.machine.cost_model.engine_pairs)
        judged = _geomean(speed["engine_over_yardstick"][b] / pairs[b] for b in batches if pairs.get(b))
    else:  # a profile from before its pairs were stored: its engine term over its yardstick time
        judged = _geomean(speed["engine_over_yardstick"][b] / (profile.decode_cost(int(b)) / then[b]) for b in batches)
    waits = _geomean((speed.get("engine_wall_over_cpu") or {}).get(b) for b in batches)
    return {"engine_over_yardstick": judged,
            # the engine's steps' wall over CPU time, over the yardstick's: a step that waits (streamlab.bench_step.engine_speed)
            "engine_waits": waits,
            "engine_slowdown": judged * waits if judged is not None and waits is not None else judged,
            "engine_over_profile": _geomean(speed["decode_s"][b] / profile.decode_cost(int(b)) for b in batches),
            "speed_factor": _geomean(speed["yardstick_s"][b] / then[b] for b in batches),
            "engine_decode_s": speed["decode_s"], "yardstick_s": speed["yardstick_s"],
            "pairs": speed["engine_over_yardstick"], "profile_machine": profile.machine}
