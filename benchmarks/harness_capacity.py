"""Harness capacity: how many concurrent streaming clients, and how many events a second, one
harness process sustains against a server that is never the bottleneck (`--model null`: tokens
at almost no cost, each step paced to STEP_MS), with each event's time recorded within 1 ms of
its arrival.

The clients are the scenario harness's own, run as `scenario run` runs them: a scenario's plan
(harness.clients.plan), harness.clients.client.launch, reader clients over harness.clients.client.raw_opener
(RawExchange, h11, the SSE parser, the wire's record). The server is `streamlab serve` in its
own process on the same 2 cores.

How far an event's recorded time is from its arrival: a client records an event at its read's
kernel receive stamp (SO_TIMESTAMPNS: when the read's last segment landed in the socket's queue),
so a loop that reads late still records the arrival. Every 8th client keeps its reads (times and
bytes, harness.clients.rawhttp.Read) and each event's error is bounded from them (event_errors): 0 where
a read took one whole event and nothing else (the server writes an event in one segment, so the
stamp is that event's own); otherwise the event arrived after the read before began (which took
everything then queued) and after the server wrote it (the null model's tokens carry the
server's wall clock, `written_at`), so the stamp is late by at most the stamp less the later of
the two. How late the loop got round to reading (the read's return less its stamp) and the
loop's lag (how late a 5 ms sleep wakes, harness.machine.lag) are beside it, as are the CPU seconds each
process spent per event (this one's, the server's, from /proc).
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

from harness.clients.client import launch, raw_opener
from harness.machine.lag import LoopLag
from harness.live.loops import live_loop_factory, run_on_live_loop
from harness.live.process import ServerProcess
from harness.clients.plan import plan, tokenizer_for
from harness.format.scenario import Scenario
from harness.record.trace import StreamRecord, percentile

COUNTS = (256, 512, 1024, 2048, 4096)
STEP_MS = 50.0  # about what a real engine's decode step takes: one event per stream per step
TOKENS = 64
ARRIVAL_S = 2.0  # arrivals spread evenly over this, as scenarios/scale/ does
SAMPLE = 8  # every 8th client's reads are sampled
STAMP_LIMIT_MS = 1.0  # the bound: an event's time within 1 ms of its arrival (p99 of the bound)
LAG_LIMIT_MS = 10.0  # the harness speed section's bound on the loop's p99 lag
RUN_DEADLINE_S = 120.0


def scenario(count: int) -> Scenario:
    return Scenario.model_validate({
        "name": f"capacity_{count}", "seed": 25, "modes": ["live"],
        "server": {"model": "null", "null_step_ms": STEP_MS, "max_batch": 8192, "cache_blocks": 40000,
                   "step_token_budget": 0, "waiting_limit": 16384, "max_connections": 16384},
        "groups": [{"name": "readers", "count": count, "prompt": {"tokens": [8, 16]},
                    "request": {"max_new_tokens": TOKENS}, "behaviour": {"kind": "reader"},
                    "arrival": {"kind": "uniform", "end_s": ARRIVAL_S}}]})


def server_args() -> list[str]:
    """The null server the scenarios' clients read from, by the one mapping from a scenario's
    server to `streamlab serve` options (harness.format.scenario.ServerSpec.serve_args)."""
    return scenario(1).server.serve_args() + ["--log-level", "warning"]


WRITTEN_AT = re.compile(rb'"written_at": ?([0-9.eE+-]+)')


def event_errors(reads: list) -> list[float]:
    """Per token event a sampled exchange read: seconds its recorded time (its read's stamp) can be
    after its arrival, at most (the module's docstring says how)."""
    errors: list[float] = []
    carry = b""
    for read in reads:
        *events, carry = (carry + read.data).split(b"\n\n")
        exact = len(events) == 1 and read.data.endswith(b"\n\n\r\n") and carry == b"\r\n"
        for text in events:
            written = WRITTEN_AT.search(text)
            if written is None:
                continue  # the head, start, done: not a token
            recorded = read.stamp or read.returned  # no stamp: recorded as the read returned
            errors.append(0.0 if exact and read.stamp else max(0.0, recorded - max(read.after, float(written.group(1)))))
    return errors


def cpu_seconds(pid: int | None = None) -> float:
    """User and system CPU seconds of a process (this one by default), from /proc."""
    fields = Path(f"/proc/{pid or 'self'}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def one_count(port: int, count: int, server_pid: int | None = None) -> dict:
    spec = scenario(count)
    planned = plan(spec, tokenizer_for(spec.server.model))
    records = [StreamRecord(pc.group.name, pc.index, pc.group.behaviour.kind, pc.prompt, pc.request) for pc in planned]
    sampled: list = []
    t0 = time.monotonic()  # not loop.time(): uvloop's counts whole ms (harness.live.loops)

    def opener_for(pc):
        return raw_opener(port, pc.group.behaviour, sampled if pc.index % SAMPLE == 0 else None)

    cpu0, server0 = cpu_seconds(), cpu_seconds(server_pid) if server_pid else 0.0
    async with LoopLag(0.005) as lag:
        await launch(planned, records, spec, lambda: time.monotonic() - t0, opener_for, deadline_s=RUN_DEADLINE_S)
    cpu, server_cpu = cpu_seconds() - cpu0, (cpu_seconds(server_pid) - server0) if server_pid else 0.0
    times = sorted(t for r in records for t in r.token_times)
    reads = [read for ex in sampled for read in ex.stamps]
    bounds = [error for ex in sampled for error in event_errors(ex.stamps)]
    read_late = [read.returned - read.stamp for read in reads if read.stamp]
    before_written = sum(read.stamp < float(w) for read in reads for w in WRITTEN_AT.findall(read.data))
    # The streams' busy middle: from the last arrival to the first stream's end, every client open.
    last_sent = max(r.sent_at for r in records if r.sent_at is not None)
    first_end = min((r.ended_at for r in records if r.ended_at is not None), default=last_sent)
    middle = [t for t in times if last_sent <= t <= first_end]
    span = (first_end - last_sent) if first_end > last_sent else 0.0

    def ms(values: list[float], q: float) -> float:
        value = percentile(values, q)
        return round(value * 1e3, 3) if value is not None else 0.0

    def per_event_us(seconds: float) -> float:
        return round(seconds / len(times) * 1e6, 1) if times else 0.0

    return {"clients": count, "completed": sum(r.finish == "length" for r in records),
            "failures": sum(r.failure is not None for r in records), "events": len(times),
            "events_per_s": round(len(times) / (times[-1] - times[0]), 1) if len(times) > 1 else 0.0,
            "events_per_s_all_open": round(len(middle) / span, 1) if span else 0.0,
            "ideal_events_per_s": round(count / (STEP_MS / 1e3), 1),
            "lag_p50_ms": lag.ms(50), "lag_p99_ms": lag.ms(99), "lag_max_ms": lag.max_ms(),
            "sampled_events": len(bounds), "error_p50_ms": ms(bounds, 50), "error_p99_ms": ms(bounds, 99),
            "error_max_ms": round(max(bounds, default=0.0) * 1e3, 3),
            "events_over_1ms": round(sum(b > STAMP_LIMIT_MS / 1e3 for b in bounds) / len(bounds), 4) if bounds else 0.0,
            "read_late_p50_ms": ms(read_late, 50), "read_late_p99_ms": ms(read_late, 99),
            "multi_event_reads": round(sum(r.data.count(b"\n\n") > 1 for r in reads) / len(reads), 3) if reads else 0.0,
            "stamped_before_written": before_written,  # a check on the stamps: must be 0
            "harness_cpu_us_per_event": per_event_us(cpu), "server_cpu_us_per_event": per_event_us(server_cpu)}


# The figures of the code before (c135be8: events recorded as their read returned, asyncio's loop,
# the read path before it was made cheaper), kept for the page's before/after (results/ is not
# committed); written by that commit's `python -m benchmarks.harness_capacity --before c135be8`.
BEFORE = Path(__file__).resolve().parent / "capacity_before.json"


def before() -> dict | None:
    return json.loads(BEFORE.read_text()) if BEFORE.exists() else None


def sustained(rows: list[dict]) -> int:
    """The largest count below the first that lost a stream or passed the 1 ms bound (p99)."""
    best = 0
    for r in rows:
        if r["completed"] < r["clients"] or r["error_p99_ms"] > STAMP_LIMIT_MS:
            break
        best = r["clients"]
    return best


async def run_counts(log_dir: Path, say, counts: tuple[int, ...], loop_name: str) -> list[dict]:
    rows = []
    async with ServerProcess(server_args(), log_dir=log_dir) as server:
        for count in counts:
            say(f"harness capacity ({loop_name}): {count} concurrent clients")
            t = time.perf_counter()
            rows.append({**await one_count(server.port, count, server.proc.pid), "wall_s": round(time.perf_counter() - t, 1)})
            say(f"  {rows[-1]}")
            await server.settle()
    return rows


LOOPS = ("asyncio", "uvloop")  # asyncio's own loop, and the live harness's (harness.live.loops) where uvloop is installed


def run(log_dir: Path, say, counts: tuple[int, ...] = COUNTS, loops: tuple[str, ...] = LOOPS) -> dict:
    by_loop = {}
    for name in loops:
        if name not in LOOPS:
            raise ValueError(f"no loop {name!r}: one of {', '.join(LOOPS)}")
        if name == "uvloop" and live_loop_factory() is None:
            say(f"harness capacity: {name} is not installed, so its rows are left out")
            continue
        rows = run_on_live_loop(run_counts(log_dir, say, counts, name), uvloop=name == "uvloop")
        by_loop[name] = {"rows": rows, "sustained_clients": sustained(rows)}
    return {"loops": by_loop, "stamp_limit_ms": STAMP_LIMIT_MS, "lag_limit_ms": LAG_LIMIT_MS, "step_ms": STEP_MS,
            "tokens": TOKENS, "arrival_s": ARRIVAL_S, "sample_every": SAMPLE}


if __name__ == "__main__":  # python -m benchmarks.harness_capacity [COUNT ...] [--loop asyncio|uvloop]: no page
    import sys
    import tempfile

    args = sys.argv[1:]
    picked = tuple(int(a) for a in args if a.isdigit()) or COUNTS
    loops = (args[args.index("--loop") + 1],) if "--loop" in args else LOOPS
    result = run(Path(tempfile.mkdtemp(prefix="streamlab-capacity-")), print, picked, loops)
    print({name: got["sustained_clients"] for name, got in result["loops"].items()})
