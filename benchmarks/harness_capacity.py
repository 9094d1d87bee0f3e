"""Harness capacity: how many concurrent streaming clients, and how many events a second, one
harness process sustains against a server that is never the bottleneck (`--model null`: tokens
at almost no cost, each step paced to STEP_MS), with each event's time recorded within 1 ms of
its arrival.

The clients are the scenario harness's own, run as `scenario run` runs them: a scenario's plan
(harness.plan), harness.clients.launch, reader clients over harness.clients.raw_opener
(RawExchange, h11, the SSE parser, the wire's record). The server is `streamlab serve` in its
own process on the same 2 cores.

How late an event is recorded: every SAMPLE-th client's socket has SO_TIMESTAMPNS, so the kernel
stamps each segment with the wall-clock time it landed in the socket's receive queue. A read
returns its last segment's stamp; a client records its events' times as the read returns
(Client.note, on the same task with no wait between), so the figure is that moment's wall clock
less the stamp. Where one read took several events the earlier ones came in earlier segments and
were late by more than that figure: the share of such reads is reported beside it. Loop lag is how
late a 5 ms sleep wakes in the harness's event loop (harness.lag).
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

from harness.clients import launch, raw_opener
from harness.lag import LoopLag
from harness.live import ServerProcess
from harness.plan import plan, tokenizer_for
from harness.scenario import Scenario
from harness.trace import StreamRecord, percentile

COUNTS = (256, 512, 1024, 2048, 4096)
STEP_MS = 50.0  # about what a real engine's decode step takes: one event per stream per step
TOKENS = 64
ARRIVAL_S = 2.0  # arrivals spread evenly over this, as scenarios/scale/ does
SAMPLE = 8  # every 8th client's socket is stamped
STAMP_LIMIT_MS = 1.0  # the bound: an event's time within 1 ms of its arrival (p99)
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
    server to `streamlab serve` options (harness.scenario.ServerSpec.serve_args)."""
    return scenario(1).server.serve_args() + ["--log-level", "warning"]


async def one_count(port: int, count: int) -> dict:
    spec = scenario(count)
    planned = plan(spec, tokenizer_for(spec.server.model))
    records = [StreamRecord(pc.group.name, pc.index, pc.group.behaviour.kind, pc.prompt, pc.request) for pc in planned]
    stamped: list = []
    loop = asyncio.get_running_loop()
    t0 = loop.time()

    def opener_for(pc):
        return raw_opener(port, pc.group.behaviour, stamped if pc.index % SAMPLE == 0 else None)

    async with LoopLag(0.005) as lag:
        await launch(planned, records, spec, lambda: loop.time() - t0, opener_for, deadline_s=RUN_DEADLINE_S)
    times = sorted(t for r in records for t in r.token_times)
    reads = [read for ex in stamped for read in ex.stamps]
    late = [seconds for seconds, _ in reads]
    # The streams' busy middle: from the last arrival to the first stream's end, every client open.
    last_sent = max(r.sent_at for r in records if r.sent_at is not None)
    first_end = min((r.ended_at for r in records if r.ended_at is not None), default=last_sent)
    middle = [t for t in times if last_sent <= t <= first_end]
    span = (first_end - last_sent) if first_end > last_sent else 0.0

    def ms(values: list[float], q: float) -> float:
        value = percentile(values, q)
        return round(value * 1e3, 3) if value is not None else 0.0

    return {"clients": count, "completed": sum(r.finish == "length" for r in records),
            "failures": sum(r.failure is not None for r in records), "events": len(times),
            "events_per_s": round(len(times) / (times[-1] - times[0]), 1) if len(times) > 1 else 0.0,
            "events_per_s_all_open": round(len(middle) / span, 1) if span else 0.0,
            "ideal_events_per_s": round(count / (STEP_MS / 1e3), 1),
            "lag_p50_ms": lag.ms(50), "lag_p99_ms": lag.ms(99), "lag_max_ms": lag.max_ms(),
            "stamp_reads": len(late), "stamp_p50_ms": ms(late, 50), "stamp_p99_ms": ms(late, 99),
            "stamp_max_ms": round(max(late, default=0.0) * 1e3, 3),
            "multi_event_reads": round(sum(n > 1 for _, n in reads) / len(reads), 3) if reads else 0.0}


# The figures of the code before its read path was made cheaper, kept for the page's before/after
# (results/ is not committed): written by `python -m benchmarks.harness_capacity --before COMMIT`.
BEFORE = Path(__file__).resolve().parent / "capacity_before.json"


def before() -> dict | None:
    return json.loads(BEFORE.read_text()) if BEFORE.exists() else None


def sustained(rows: list[dict]) -> int:
    """The largest count below the first that lost a stream or passed the stamp bound (p99)."""
    best = 0
    for r in rows:
        if r["completed"] < r["clients"] or r["stamp_p99_ms"] > STAMP_LIMIT_MS:
            break
        best = r["clients"]
    return best


async def run(log_dir: Path, say, counts: tuple[int, ...] = COUNTS) -> dict:
    rows = []
    async with ServerProcess(server_args(), log_dir=log_dir) as server:
        for count in counts:
            say(f"harness capacity: {count} concurrent clients")
            t = time.perf_counter()
            rows.append({**await one_count(server.port, count), "wall_s": round(time.perf_counter() - t, 1)})
            say(f"  {rows[-1]}")
            await server.settle()
    return {"rows": rows, "sustained_clients": sustained(rows), "stamp_limit_ms": STAMP_LIMIT_MS,
            "lag_limit_ms": LAG_LIMIT_MS, "step_ms": STEP_MS, "tokens": TOKENS, "arrival_s": ARRIVAL_S,
            "sample_every": SAMPLE}


if __name__ == "__main__":  # python -m benchmarks.harness_capacity [COUNT ...] [--before COMMIT]: no page
    import sys
    import tempfile

    args = sys.argv[1:]
    code = args[args.index("--before") + 1] if "--before" in args else None
    picked = tuple(int(a) for a in args if a.isdigit()) or COUNTS
    result = asyncio.run(run(Path(tempfile.mkdtemp(prefix="streamlab-capacity-")), print, picked))
    print({k: v for k, v in result.items() if k != "rows"})
    if code:
        BEFORE.write_text(json.dumps({**result, "code": code}, indent=1) + "\n")
        print(f"wrote {BEFORE}")
