"""Slow readers: 0, 1, 2 or 4 slow readers among 8 streams, under each policy, live.

These are the scenario library's slow_reader_<policy>_<k> files, replayed live (a real server
process, raw sockets, readers that really stop reading; the slow group's events are padded so
that a slow reader really pushes back: see the scenario files). What the chapter reported:
the healthy streams' completion and gap p99, when each slow stream's blocks went back, and
what a slow reader holds in server memory under `unbounded`.
"""

from __future__ import annotations

from pathlib import Path

from harness.run.once import run_live
from harness.record.trace import metric_values, percentile
from harness.format.load import load
from streamlab.idle import pool_whole

POLICIES = ("naive", "unbounded", "pause", "drop", "pause_then_drop")
SLOW = (0, 1, 2, 4)
TOKEN_EVENT_BYTES = 85  # an unpadded token event on the wire (streamlab lab bytes)


def one(policy: str, slow: int, say) -> dict:
    scenario = load(Path("scenarios") / f"slow_reader_{policy}_{slow}.yaml")
    say(f"slow readers: {policy}, {slow} slow")
    trace, _ = run_live(scenario)
    healthy = trace.group("healthy")
    slow_streams = trace.group("slow")
    released = {r["request_id"]: r for r in trace.releases}
    pad = next((g.request.pad_bytes for g in scenario.groups if g.name == "slow"), 0)
    peaks = {c["request_id"]: c["max_queued_events"] for c in trace.server.get("closed_streams", [])}
    slow_release_s = [released[s.request_id]["released_at"] - s.sent_at for s in slow_streams
                      if s.request_id in released]
    slow_peaks = [peaks[s.request_id] for s in slow_streams if s.request_id in peaks]
    completion = metric_values(healthy, "completion_s")
    gaps = metric_values(healthy, "gap_s")
    return {"policy": policy, "slow": slow,
            "healthy_completion_p50_s": percentile(completion, 50), "healthy_completion_max_s": max(completion),
            "healthy_gap_p99_s": percentile(gaps, 99),
            "slow_released_after_s": sorted(slow_release_s),
            "slow_finish": sorted(str(s.finish) for s in slow_streams),
            "slow_peak_queued_events": slow_peaks,
            # What those events weigh once formatted, which is what a server that formats
            # eagerly would hold; ours queues them unformatted and pads at write time.
            "slow_peak_queued_bytes_formatted": [p * (TOKEN_EVENT_BYTES + pad) for p in slow_peaks],
            "server_clean": pool_whole(trace.server) and not trace.invariants}


def run(say) -> dict:
    return {"rows": [one(policy, slow, say) for policy in POLICIES for slow in SLOW]}
