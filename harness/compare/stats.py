"""The figures a comparison reads from one run, and the paired test that judges two sides' rounds.

Each round runs both sides back to back (ABBA), so a round's candidate/baseline ratio is formed
within minutes and the machine's drift over the gate mostly cancels. Per figure the gate has one
log-ratio per round. The effect is the Hodges-Lehmann estimate that goes with Wilcoxon's test
(the median of the rounds' pairwise mean log-ratios): one round a machine pause moved cannot
carry it past the threshold, nor hide a slowdown every other round shows, as a plain mean
could. Its confidence interval is a bootstrap over rounds; the test is Wilcoxon's signed-rank
test (paired, no assumption of normality; exact without ties, a permutation test with them).
Both come from scipy.stats.

A figure is a regression when the test is significant and the effect is worse than the threshold;
an improvement likewise the other way. A scenario fails on any of its figures, so they are one
family: Holm's step-down holds the chance that an unchanged server is flagged to alpha per scenario,
whatever the figures' dependence (`holm`). Uncorrected, alpha per figure let 1 of 10 A/A gates here
(3 scenarios, 24 figures) flag one (disconnect_fin_mid's droppers' TTFT p50, 1.16x, p 0.0034;
docs/COMPARE.md).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace

import numpy as np
from scipy import stats

from harness.record.trace import Trace, metric_values, percentile

METRICS = ("ttft_s", "gap_s", "completion_s")
TAIL_FROM = 10  # a group's p90 is read where it has this many values in a run (fewer: its p90 is its max)
THROUGHPUT = "tokens_per_s"  # the whole run's tokens over its duration: higher is better


def figures(trace: Trace) -> dict[str, float]:
    """'group metric pNN' -> seconds, for each group's p50 (and p90 where the sample allows), and
    the run's tokens per second."""
    out: dict[str, float] = {}
    for group in dict.fromkeys(s.group for s in trace.streams):
        for metric in METRICS:
            values = metric_values(trace.group(group), metric)
            if not values:
                continue
            out[f"{group} {metric} p50"] = percentile(values, 50)
            if len(values) >= TAIL_FROM:
                out[f"{group} {metric} p90"] = percentile(values, 90)
    tokens = sum(len(s.token_times) for s in trace.streams)
    if tokens and trace.duration_s > 0:
        out[f"run {THROUGHPUT}"] = tokens / trace.duration_s
    return out


def higher_is_better(figure: str) -> bool:
    return figure.endswith(THROUGHPUT)


@dataclass
class Judged:
    figure: str
    baseline: float  # median over rounds
    candidate: float
    effect: float  # candidate over baseline: the Hodges-Lehmann estimate over the rounds' log-ratios
    low: float  # its confidence interval (1 - alpha), bootstrap over rounds
    high: float
    p: float  # Wilcoxon signed-rank, two-sided
    rounds: int
    verdict: str  # "regression", "improvement" or "same"

    def as_dict(self) -> dict:
        return asdict(self)


def worse_by(effect: float, figure: str) -> float:
    """How much worse the candidate is, as a fraction (negative: better)."""
    return 1 / effect - 1 if higher_is_better(figure) else effect - 1


def judge(figure: str, baseline: list[float], candidate: list[float], alpha: float, threshold: float,
          seed: int = 0) -> Judged:
    """Two sides' values of one figure, paired by round."""
    pairs = [(b, c) for b, c in zip(baseline, candidate) if b > 0 and c > 0]
    logs = log_ratios(baseline, candidate)
    n = len(logs)
    effect = float(math.exp(hodges_lehmann(logs))) if n else 1.0
    low = high = effect
    if n >= 2 and np.ptp(logs) > 0:
        ci = stats.bootstrap((logs,), hodges_lehmann, confidence_level=1 - alpha, n_resamples=2000,
                             method="percentile", random_state=seed).confidence_interval
        low, high = math.exp(ci.low), math.exp(ci.high)
    p = signed_rank_p(logs)
    return Judged(figure, float(np.median([b for b, _ in pairs])) if n else math.nan,
                  float(np.median([c for _, c in pairs])) if n else math.nan, effect, low, high, p, n,
                  verdict(figure, effect, p, alpha, threshold))


def hodges_lehmann(logs, axis: int = -1) -> float:
    """The median of the Walsh averages (every pair's mean, each value with itself included)."""
    x = np.asarray(logs)
    i, j = np.triu_indices(x.shape[axis])
    return np.median((np.take(x, i, axis=axis) + np.take(x, j, axis=axis)) / 2, axis=axis)


def verdict(figure: str, effect: float, p: float, alpha: float, threshold: float) -> str:
    worse = worse_by(effect, figure)
    if p < alpha and worse > threshold:
        return "regression"
    if p < alpha and -worse > threshold / (1 + threshold):  # as far the other way: 1.10x faster
        return "improvement"
    return "same"


def holm(judged: list[Judged], alpha: float, threshold: float) -> list[Judged]:
    """Each figure's verdict again, its p held to Holm's level: the k-th smallest p of m against
    alpha / (m - k + 1), stopping at the first that misses. Same order as given."""
    m = len(judged)
    out = list(judged)
    rejecting = True
    for k, i in enumerate(sorted(range(m), key=lambda i: judged[i].p)):
        rejecting = rejecting and judged[i].p < alpha / (m - k)
        j = judged[i]
        out[i] = replace(j, verdict=verdict(j.figure, j.effect, j.p if rejecting else 1.0, alpha, threshold))
    return out


def log_ratios(baseline: list[float], candidate: list[float]) -> np.ndarray:
    return np.array([math.log(c / b) for b, c in zip(baseline, candidate) if b > 0 and c > 0])


def signed_rank_p(logs: np.ndarray) -> float:
    """Wilcoxon's two-sided p over the rounds' log-ratios; 1 where every round is a tie or there
    are too few rounds to test."""
    if len(logs) < 2 or not np.any(logs):
        return 1.0
    return float(stats.wilcoxon(logs, zero_method="wilcox", alternative="two-sided").pvalue)


def smallest_detectable(figure: str, baseline: list[float], candidate: list[float], alpha: float,
                        threshold: float) -> float | None:
    """From an A/A gate's rounds: the smallest slowdown (candidate x s) this figure's noise would
    let the gate call a regression with these rounds; None past 3x."""
    logs = log_ratios(baseline, candidate)
    if len(logs) < 2:
        return None
    sign = -1 if higher_is_better(figure) else 1
    for s in np.arange(1.01, 3.0, 0.01):
        shifted = logs + sign * math.log(s)
        if verdict(figure, math.exp(hodges_lehmann(shifted)), signed_rank_p(shifted), alpha, threshold) == "regression":
            return float(round(s, 2))
    return None


def least_rounds(alpha: float) -> int:
    """The fewest rounds at which a signed-rank test can reach alpha at all (every round one way:
    p = 2 / 2^n), so a gate with fewer can never report a regression."""
    return next(n for n in range(2, 64) if 2 / 2 ** n < alpha)
