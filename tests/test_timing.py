"""harness/judge/timing.py: every timing verdict judged on figures of this machine and session.

A trace 3x slower with the same shape (a slower machine) passes; a first token two steps late
fails the simulated gate; one noisy live run is judged again with up to two more, and a real
regression, slow in each, still fails. (The engine against the yardstick: test_drift.py; the
server's pace: test_pace.py.)
"""

from __future__ import annotations

import copy
import os

import pytest

from harness.run import once, runner
from harness.judge import timing
from harness.judge.baselines import baseline_figures
from harness.machine.pace import machine_pause
from harness.record.trace import StreamRecord
from harness.format.load import load_by_name
from tests.helpers import as_mode, client_trace


def ctx() -> runner.RunContext:
    return runner.RunContext(results_dir=None)


def stretched(trace, factor: float, mode: str | None = None):
    """The same trace with every stream's times stretched by `factor` from its send."""
    out = copy.deepcopy(trace)
    out.mode = mode or trace.mode
    for s in out.streams:
        s.token_times = [s.sent_at + factor * (t - s.sent_at) for t in s.token_times]
        s.ended_at = s.sent_at + factor * (s.ended_at - s.sent_at)
    return out





# ---- the live gate: committed live/sim ratios times this machine's simulated figures ----

def test_a_live_trace_three_times_slower_with_the_same_shape_passes_the_gate(overlap_4):
    scenario, sim = overlap_4
    live = stretched(sim, 1.1, "live")
    committed = {scenario.name: {"live": baseline_figures(live, sim)}}
    assert timing.regression(live, committed, sim).passed
    # A machine 3x slower: its simulation (under its own profile) and its live run both 3x.
    slower_sim, slower_live = stretched(sim, 3.0), stretched(live, 3.0)
    assert timing.regression(slower_live, committed, slower_sim).passed
    # A live run 6x slower than this machine's simulation says is a regression.
    assert not timing.regression(stretched(live, 6.0), committed, sim).passed


def test_the_live_gate_takes_the_best_run_and_still_fails_a_real_regression(overlap_4):
    scenario, sim = overlap_4
    committed = {scenario.name: {"live": baseline_figures(stretched(sim, 1.0, "live"), sim)}}  # live/sim 1.0
    stalled, fine = stretched(sim, 8.0, "live"), stretched(sim, 1.2, "live")  # 8 x ~110 ms > 3 x 110 + 250 ms
    assert not timing.regression(stalled, committed, sim).passed
    assert timing.regression(stalled, committed, sim, again=[fine]).passed  # one stalled run is not a regression
    assert timing.regression(stalled, committed, sim, again=[stalled, fine]).passed  # nor two, with a third fine
    assert not timing.regression(stalled, committed, sim, again=[stretched(sim, 7.0, "live")]).passed  # slow twice is
    assert not timing.regression(stalled, committed, sim, again=[stalled, stretched(sim, 7.0, "live")]).passed


def test_a_live_baseline_is_a_ratio_to_the_simulation():
    trace = once.simulate(load_by_name("overlap_1"))[0]
    figures = baseline_figures(stretched(trace, 1.25, "live"), trace)
    assert figures["streams"]["completion_s_p50_over_sim"] == pytest.approx(1.25, rel=0.02)
    assert baseline_figures(trace)["streams"]["completion_s_p50"] == round(
        timing.p50(trace, "streams", "completion_s"), 6)  # simulated: virtual seconds


# ---- the simulated gate: deterministic virtual seconds, tight ----

def test_first_tokens_two_steps_late_fail_the_simulated_gate(monkeypatch):
    from streamlab.engine.scheduler import Scheduler
    original = Scheduler.schedule

    def two_steps_late(self, step):
        held = [s for s in self.waiting if step - self.__dict__.setdefault("_seen", {}).setdefault(s.seq_id, step) < 2]
        for s in held:
            self.waiting.remove(s)
        try:
            return original(self, step)
        finally:
            self.waiting.extend(held)

    assert runner.run_scenario(load_by_name("late_joiners_8"), "sim", ctx()).ok
    monkeypatch.setattr(Scheduler, "schedule", two_steps_late)
    outcome = runner.run_scenario(load_by_name("late_joiners_8"), "sim", ctx())
    gate = next(c for c in outcome.checks if c.name == "regression")
    assert not gate.passed and "ttft_s_p50" in " ".join(gate.details)


# ---- a scenario's own latency bounds: ratios within one back-to-back pair ----

def test_a_live_latency_ratio_takes_the_best_pair_and_still_fails_a_real_stall():
    """overlap_8's gap against overlap_1's: each pair is a run of the scenario and of its baseline;
    one pair slowed by the shared machine passes on the other, a stall in both fails."""
    def trace(name: str, gap_s: float):
        times = [0.01 + k * gap_s for k in range(20)]
        streams = [StreamRecord("streams", i, "reader", "p", {}, sent_at=0.0, token_times=times,
                                ended_at=times[-1], finish="length") for i in range(2)]
        return client_trace(name, "live", streams)
    scenario = load_by_name("overlap_8")  # streams gap_s p50 <= 4 x overlap_1's
    one = {"overlap_1": trace("overlap_1", 0.0005)}
    slow, fine = trace("overlap_8", 0.0025), trace("overlap_8", 0.0012)
    assert not timing.latency(scenario, slow, one).passed
    check = timing.latency(scenario, slow, one, [(fine, {"overlap_1": trace("overlap_1", 0.0006)})])
    assert check.passed and "better of 2 runs" in check.figure
    check = timing.latency(scenario, slow, one, [(slow, one), (fine, {"overlap_1": trace("overlap_1", 0.0006)})])
    assert check.passed and "best of 3 runs" in check.figure
    # The ratio is judged within a pair: a fast baseline in the second pair does not rescue it.
    assert not timing.latency(scenario, slow, one, [(fine, {"overlap_1": trace("overlap_1", 0.0002)})]).passed
    assert not timing.latency(scenario, slow, one, [(trace("overlap_8", 0.0030), one)]).passed
    assert not timing.latency(scenario, slow, one, [(slow, one), (trace("overlap_8", 0.0030), one)]).passed


# ---- parity: the same rule ----

def test_parity_takes_the_best_run_and_never_retries_a_token_difference(overlap_4):
    scenario, sim = overlap_4

    def judged(*factors: float, **kw):
        return timing.parity(scenario, [(stretched(sim, f), sim) for f in factors], **kw)
    assert judged(1.2).passed
    slow = judged(1.6)
    assert not slow.passed and timing.timing_only(slow)  # completion 1.6x is out of [0.7, 1.4]
    assert judged(1.6, 1.1).passed
    assert judged(1.6, 1.5, 1.1).passed and "3 live runs" in judged(1.6, 1.5, 1.1).figure
    assert not judged(1.6, 1.5).passed
    assert not judged(1.6, 1.5, 1.45).passed  # slow in every run
    assert not judged(0.5, 1.5).passed
    assert judged(1.6, judge_timing=False).passed  # reported only
    changed = stretched(sim, 1.0)
    changed.streams[0].token_ids[3] += 1
    tokens = timing.parity(scenario, [(changed, sim)])
    assert not tokens.passed and not timing.timing_only(tokens)


def test_parity_compares_interquartile_means_so_one_stream_in_an_earlier_wave_does_not_flip_it():
    """First tokens come in waves a prefill step apart. Seven streams in waves at 17, 23 and 30 ms
    (one at 37): the nearest-rank p50 is the 4th value, and one stream landing a wave sooner moves
    it by a whole wave (23 -> 17 ms, 0.57x of a simulated 30 ms: out of [0.6, 1.6], as a CI run
    read slow_reader_drop_1). The interquartile mean moves by a fraction of that; a whole group
    a wave sooner or later still moves it by the wave, and a stall in one stream does not."""
    from harness.record.trace import interquartile_mean, percentile
    sim = [18.5, 24.5, 24.5, 29.8, 29.8, 29.8, 32.6]
    live = [16.6, 16.7, 16.8, 23.2, 29.9, 30.0, 37.5]
    sooner = [16.6, 16.7, 16.8, 16.9, 29.9, 30.0, 37.5]  # one stream a wave sooner
    assert percentile(live, 50) / percentile(sim, 50) > 0.75
    assert percentile(sooner, 50) / percentile(sim, 50) < 0.6  # p50 jumps a wave
    assert 0.6 < interquartile_mean(sooner) / interquartile_mean(sim) < interquartile_mean(live) / interquartile_mean(sim)
    assert interquartile_mean([v * 1.7 for v in sim]) / interquartile_mean(sim) == pytest.approx(1.7)  # a real shift
    assert interquartile_mean(live[:-1] + [500.0]) == pytest.approx(interquartile_mean(live))  # a stall in the top quarter
    assert interquartile_mean([2.0]) == 2.0 and interquartile_mean([1.0, 3.0]) == 2.0 and interquartile_mean([]) is None


def test_better_picks_the_run_nearest_the_inside_of_its_bound():
    assert timing.better([1.6, 1.1], 0.7, 1.4) == 1.1
    assert timing.better([0.5, 1.5], 0.7, 1.4) == 1.5  # 1.5/1.4 is nearer than 0.7/0.5
    assert timing.better([3.0, 2.0]) == 2.0  # a one-sided bound: the lower


def test_a_figure_within_one_machine_pause_of_its_simulation_agrees(monkeypatch):
    """Live, a CPU quota's pause lands whole in a lone first token or not at all; the simulation
    spreads it over every step. A first token late by less than the longest pause the step thread
    took in its span agrees; late by more, or with no such pause (a faster machine, or a real
    regression), it does not."""
    from harness.machine import cpu_quota as quota
    monkeypatch.setattr(quota, "_cfs", lambda: None)  # whatever quota this test runs under
    quota.quota_pause_s.cache_clear()
    scenario = load_by_name("overlap_1")
    sim = once.simulate(scenario)[0]
    group = sim.streams[0].group
    ttft = timing.typical(sim, group, "ttft_s")
    late = 1.2 * ttft  # 2.2x: outside [0.6, 1.6]

    def live(pause_s: float, late_s: float):
        out = as_mode(copy.deepcopy(sim))
        for s in out.streams:
            s.token_times = [t + late_s for t in s.token_times]
            s.ended_at += late_s
        waited, held = 0.0, False
        for st in out.steps:  # the first step after the send holds the pause; later steps are late
            st["began"] += late_s if held else 0.0
            st["cpu_waited_s"] = waited
            if st["began"] >= out.streams[0].sent_at and not held:
                held, waited = True, waited + pause_s
                st["seconds"] += late_s
            st["cpu_waited_end_s"] = waited
        return out

    held = timing.parity(scenario, [(live(late, late), sim)])
    assert held.passed, held.details
    assert "late by no more than one machine pause" in held.figure
    assert machine_pause(live(late, late), group, "ttft_s") == pytest.approx(late)
    assert not timing.parity(scenario, [(live(0.0, late), sim)]).passed  # no pause: late is late
    assert not timing.parity(scenario, [(live(late / 3, late), sim)]).passed  # 2.2x less a short pause: 1.8x
    assert machine_pause(sim, group, "ttft_s") == 0.0
    early = -0.5 * ttft  # 0.5x: a pause never excuses a figure that came early
    assert not timing.parity(scenario, [(live(ttft, early), sim)]).passed
    rows = timing.parity_rows(scenario, [(live(late + 0.001, late), sim)])
    assert [r["late_by_a_pause"]["run"] for r in rows if r["late_by_a_pause"]] == [1]
    from harness.judge.report import parity_summary
    assert "1 more past them by no more than one machine pause" in parity_summary(rows)
    quota.quota_pause_s.cache_clear()
    try:  # under a quota, one step's delay counts no more than the longest pause the quota makes
        period_us, cores = int(late * 1e6), len(os.sched_getaffinity(0))
        monkeypatch.setattr(quota, "_cfs", lambda: (cores * period_us // 2, period_us))  # half of each period
        assert machine_pause(live(4 * late, late), group, "ttft_s") == pytest.approx(late / 2, rel=0.01)
    finally:
        quota.quota_pause_s.cache_clear()
