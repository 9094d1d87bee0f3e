"""Whether the harness kept to its schedule: each client's send lateness (sent - due) and the
client loop's lag. A run that fell behind measured another load than its scenario's and stamped
its tokens late, so its timing checks say so instead of passing (harness.judge.checks.run_checks)."""

from __future__ import annotations

from harness.judge.bounds import LOOP_LAG_S, SEND_LATE_S
from harness.record.trace import Trace, metric_values, percentile

# Judged on what the harness measured of itself: the scenario's timing bounds, the gates, parity,
# and goodput (its SLO is a first token and a pace, timed by the same clients).
TIMING_DEPENDENT = ("goodput", "profile_drift", "latency", "regression", "parity")


def lateness_figures(trace: Trace) -> dict[str, float | None]:
    """The run's send lateness (p50, p99, max) and loop lag p99, in seconds (None: not measured)."""
    late = metric_values(trace.streams, "send_lateness_s")
    lag = trace.loop_lag_ms.get("p99")
    return {"late_p50_s": percentile(late, 50), "late_p99_s": percentile(late, 99),
            "late_max_s": max(late, default=None), "loop_lag_p99_s": None if lag is None else lag / 1e3}


def behind(trace: Trace) -> str | None:
    """Why this run's timing cannot be judged (the harness fell behind), or None."""
    f = lateness_figures(trace)
    why = []
    if f["late_p99_s"] is not None and f["late_p99_s"] > SEND_LATE_S:
        why.append(f"clients sent late: p99 {f['late_p99_s'] * 1e3:.0f} ms, max {f['late_max_s'] * 1e3:.0f} ms "
                   f"(bound {SEND_LATE_S * 1e3:g} ms)")
    if f["loop_lag_p99_s"] is not None and f["loop_lag_p99_s"] > LOOP_LAG_S:
        why.append(f"the client loop lagged: p99 {f['loop_lag_p99_s'] * 1e3:.0f} ms (bound {LOOP_LAG_S * 1e3:g} ms)")
    return "the harness fell behind its schedule: " + "; ".join(why) if why else None
