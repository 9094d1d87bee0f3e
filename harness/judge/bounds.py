"""Every timing bound, one owner (issue 21): the gates, parity's ranges, drift's bound and the
re-run count, each with the measurement that sized it. harness.judge.timing judges by them;
a bound cannot be loosened in one place and kept in another."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Allowance:
    """A figure may be up to `ratio` x its reference plus `slack_s`."""
    ratio: float
    slack_s: float

    def limit(self, reference_s: float) -> float:
        return self.ratio * reference_s + self.slack_s

    def __str__(self) -> str:
        return f"{self.ratio:g} x + {self.slack_s * 1e3:g}ms"


# Simulation: deterministic for a given profile, so 10% is room for a deliberate small change and
# still catches a first token two steps late. A new committed profile means new baselines.
SIM_GATE = Allowance(1.10, 0.0005)
# Live: the machine is shared and noisy. A fresh server's first tokens vary by 250 ms (41 against
# 230 ms seen), and one run in a few has a 0.5 s stall; the figure it multiplies is this
# machine's own simulated figure, so the ratio only has to cover the run's noise.
LIVE_GATE = Allowance(3.0, 0.25)
# capacity_restored's probe (a target's first tokens before and after a run) has one live
# figure's noise: the same allowance.
CAPACITY = LIVE_GATE

# Parity: live/sim per group, unless a scenario widens it with a reason. First tokens carry more
# of the machine's noise than completions. The figure compared is each group's interquartile mean
# (typical()), not its nearest-rank p50: first tokens come in waves a prefill step apart, and over
# a few streams the p50 jumps a whole wave when one stream lands in the wave before (a CI run read
# slow_reader_drop_1's healthy TTFT 0.57x twice, 16.7 against 29.8 ms, where this run here read
# 0.78x; its interquartile means read 0.70x and 0.90x). The bounds are the same.
PARITY_COMPLETION = (0.7, 1.4)
PARITY_TTFT = (0.6, 1.6)
FIGURE = "IQM"  # how parity names the figure it compares (typical())

# Drift: the engine's decode step alone, timed right after the run on the run's own engine code,
# model, attention and lab slowdown (the server's /debug/engine-speed live, in-process in
# simulation), each burst paired with a burst of the yardstick (transformers' own GPT-2 on the
# same weights) at the same shape; their median ratio over the same paired reading stored in the
# profile when it was made (reference_s.pairs). Both in CPU time, both in
# tight loops. 1.0 is the engine the profile measured, on a slower or a faster machine. Timing
# the run's own steps instead was tried: what an unchanged engine read there depended on the run
# around its steps (0.9 to 1.7 in simulation, 1.0 to 1.4 live, moving up to 40% between suite
# runs of one scenario), which no 1.5x bound can see through. Reading the engine and the
# yardstick apart, each at its fastest, was tried next: the yardstick alone moved 1.0-1.6x
# between readings seconds apart, and a 1.5x slowdown written into the engine read 1.24x in CI.
# Against the profile's engine term over its yardstick time (two loops, not one pair) an unchanged
# engine read 0.76-0.93; against the stored pairs, 0.93-0.96, and 1.5x slowed 1.50-1.61.
# DRIFT 1.25: over the spread measured (docs/HARNESS.md) and under the 1.5x slowdown it must catch.
DRIFT = 1.25


# AGAIN: at most this many live runs of a scenario. Two left CI red in half its fresh-clone runs
# (stops 29 and 30 and a side run of 9c80cd2: one or two groups of about 80 each, out in both of
# their runs, every outcome, token and release equal): access_key's first tokens read 3.79x then
# 1.45x, disconnect_rst_mid's 2.12x then 1.75x; a minute of a shared machine spans two short runs.
# A third run costs a few seconds, only where two failed; a server that is slower fails all three.
RUNS = 3
