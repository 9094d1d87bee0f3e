"""Exercises 3 and 4: what a reverse proxy does to streams, and what resumption keeps.

  buffering   the same streams direct, through nginx honouring our X-Accel-Buffering: no, through
              nginx ignoring it (its default buffering), and over TLS + HTTP/2: TTFT and gaps
  idle        scenarios/proxy_idle_{keepalive,silent}.yaml: a stream waiting behind a short
              proxy_read_timeout, keep-alive comments on and off
  resume      memory a resumable stream keeps: its replay buffer, measured with tracemalloc
"""

from __future__ import annotations

import statistics
import tracemalloc

from harness.record.trace import metric_values, percentile
from harness.run.once import run_live
from harness.format.scenario import Scenario
from harness.format.load import load_by_name
from streamlab.config import ResumeConfig
from streamlab.hub.streams import StreamEvent

PATHS = {
    "direct": None,
    "nginx, X-Accel-Buffering honoured": {"kind": "nginx"},
    "nginx, header ignored (its default buffering)": {"kind": "nginx", "honour_accel_buffering": False},
    "nginx, TLS + HTTP/2, header honoured": {"kind": "nginx", "tls": True, "http2": True},
}


def buffering_scenario(proxy: dict | None) -> Scenario:
    return Scenario.model_validate({
        "name": "proxy_buffering", "seed": 2100, "modes": ["live"],
        "server": {"model": "tiny", "max_batch": 8, **({"proxy": proxy} if proxy else {})},
        "groups": [{"name": "readers", "count": 4, "request": {"max_new_tokens": 200},
                    "behaviour": {"kind": "reader"}}]})


def buffering(reps: int, say) -> list[dict]:
    rows = []
    for label, proxy in PATHS.items():
        runs = []
        for _ in range(reps):
            trace, _ = run_live(buffering_scenario(proxy))
            streams = trace.group("readers")
            gaps = metric_values(streams, "gap_s")
            runs.append({"ttft": percentile(metric_values(streams, "ttft_s"), 50),
                         "gap50": percentile(gaps, 50), "gap99": percentile(gaps, 99), "gapmax": max(gaps),
                         "done": percentile(metric_values(streams, "completion_s"), 50),
                         "complete": sum(1 for s in streams if s.finish == "length")})
        row = {"path": label, "runs": reps, "streams": 4, "tokens": 200}
        for key in ("ttft", "gap50", "gap99", "gapmax", "done"):
            row[f"{key}_ms"] = statistics.median(r[key] for r in runs) * 1e3
        row["complete"] = min(r["complete"] for r in runs)
        say(f"proxy buffering: {label}: TTFT p50 {row['ttft_ms']:.1f} ms, gap p99 {row['gap99_ms']:.1f} ms")
        rows.append(row)
    return rows


def slow_reader(say) -> list[dict]:
    """One reader that takes 1 KiB every 0.1 s (a 4 KiB receive buffer): where does its backlog wait?"""
    rows = []
    for label in ("nginx, X-Accel-Buffering honoured", "nginx, header ignored (its default buffering)"):
        scenario = Scenario.model_validate({
            "name": "proxy_slow_reader", "seed": 2200, "modes": ["live"],
            "server": {"model": "tiny", "max_batch": 8, "policy": "pause", "queue_limit": 16,
                       "proxy": PATHS[label]},
            "groups": [{"name": "slow", "count": 1, "request": {"max_new_tokens": 300},
                        "behaviour": {"kind": "sleeper", "read_bytes": 1024, "sleep_s": 0.1,
                                      "recv_buffer_bytes": 4096}}]})
        trace, _ = run_live(scenario)
        s = trace.streams[0]
        released = trace.releases[0]["released_at"] if trace.releases else None
        rows.append({"path": label, "client_done_s": None if s.ended_at is None else s.ended_at - s.sent_at,
                     "server_released_s": None if released is None else released - s.sent_at,
                     "peak_queue": max((c["max_queued_events"] for c in trace.server.get("closed_streams", [])),
                                       default=0)})
        say(f"proxy slow reader: {label}: {rows[-1]}")
    return rows


def idle(say) -> list[dict]:
    rows = []
    for name in ("proxy_idle_keepalive", "proxy_idle_silent"):
        scenario = load_by_name(name)
        trace, _ = run_live(scenario)
        waiter = trace.group("waiter")[0]
        rows.append({"scenario": name, "keepalive_s": scenario.server.keepalive_s,
                     "read_timeout_s": scenario.server.proxy.read_timeout_s, "outcome": waiter.outcome,
                     "ttft_ms": None if not waiter.token_times else (waiter.token_times[0] - waiter.sent_at) * 1e3,
                     "ended_after_ms": None if waiter.ended_at is None and not waiter.failure else
                     ((waiter.ended_at or trace.duration_s) - waiter.sent_at) * 1e3,
                     "released": trace.server["streams_registered"] == 0 and trace.server["blocks_free"] ==
                     trace.server["blocks_total"]})
        say(f"proxy idle: {name}: waiter {waiter.outcome}")
    return rows


def resume_memory() -> dict:
    """Bytes a full replay buffer holds: the hub's own event records for token events, as the
    hub makes them (a payload dict with index, token id and a short text)."""
    config = ResumeConfig()
    events = config.buffer_events
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    kept = [StreamEvent("token", {"index": i, "token_id": 1000 + i, "text": " word"}, i + 1, 48) for i in range(events)]
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    used = sum(stat.size_diff for stat in after.compare_to(before, "filename"))
    assert len(kept) == events
    return {"buffer_events": events, "buffer_bytes_limit": config.buffer_bytes, "bytes_per_event": used / events,
            "per_stream_kib": used / 1024, "retry_ms": config.retry_ms}


def run(reps: int, say) -> dict:
    return {"buffering": buffering(reps, say), "slow_reader": slow_reader(say), "idle": idle(say),
            "resume": resume_memory()}
