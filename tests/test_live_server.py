"""Against uvicorn on a real loopback port: FIN and RST closes, the write-only control, a leak test."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import time

import httpx
import pytest
from httpx_sse import aconnect_sse

from harness.clients.rawhttp import RawExchange
from streamlab.config import CacheConfig, EngineConfig, ServiceConfig
from tests.asgi import assert_clean
from tests.live import live_server

pytestmark = pytest.mark.asyncio

PROMPT = "Return the number of items in the container."
LONG = {"prompt": PROMPT, "max_new_tokens": 900, "ignore_eos": True}


def config(max_batch: int = 4, **kw) -> ServiceConfig:
    return ServiceConfig(engine=EngineConfig(max_batch=max_batch, cache=CacheConfig(num_blocks=512)), **kw)


async def open_stream(server, body, **kw) -> tuple[RawExchange, str]:
    ex = await server.request("POST", "/v1/stream", body, **kw)
    head = await ex.read_head()
    assert head.status == 200
    return ex, head.headers["x-request-id"]


@pytest.mark.parametrize("how", ["fin", "rst"])
@pytest.mark.parametrize("moment", ["waiting_for_slot", "first_token", "mid_stream"])
async def test_close_releases_within_one_engine_step(tiny, how, moment):
    with live_server(config(max_batch=1), tiny) as server:
        blocker = None
        if moment == "waiting_for_slot":
            blocker, _ = await open_stream(server, LONG)
            await blocker.read_events(3)
        ex, rid = await open_stream(server, LONG)
        wanted = {"waiting_for_slot": 1, "first_token": 2, "mid_stream": 21}[moment]  # start event + tokens
        events = await ex.read_events(wanted)
        assert events[0].event == "start"
        if moment == "waiting_for_slot":
            assert (await server.get_json("/stats"))["waiting"] == 1
        ex.close(how)
        if blocker:
            blocker.close_fin()
        stats = await server.settle()
        assert_clean(stats)
        record = await server.release_of(rid)
        assert record["reason"] == "cancelled"
        assert record["release_step"] <= record["closed_after_step"] + 1, record
        if moment == "waiting_for_slot":
            assert record["completion_tokens"] == 0  # never admitted
        assert record["completion_tokens"] < 900
        assert stats["cancellations"]["client_gone"] >= 1


async def test_write_only_response_runs_abandoned_sequences_to_their_limit(tiny):
    """The control: a response that never listens for the disconnect wastes the whole budget."""
    with live_server(config(lab=True), tiny) as server:
        ex, rid = await open_stream(server, {**LONG, "max_new_tokens": 300, "response_class": "write_only"})
        await ex.read_events(2)
        ex.close_rst()
        stats = await server.settle()
        assert_clean(stats)
        record = await server.release_of(rid)
        assert record["reason"] == "length" and record["completion_tokens"] == 300
        assert stats["cancellations"]["client_gone"] == 0


async def test_httpx_sse_reads_the_same_events(tiny):
    """An independent SSE implementation agrees with ours on the server's own bytes."""
    with live_server(config(), tiny) as server:
        body = {"prompt": "Emoji 🎉 and CJK 世界 and a line\u2028separator", "max_new_tokens": 24, "ignore_eos": True}
        ex, _ = await open_stream(server, body)
        ours = await ex.read_events()
        ex.close_fin()
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.port}", timeout=30) as client:
            async with aconnect_sse(client, "POST", "/v1/stream", json=body) as source:
                theirs = [sse async for sse in source.aiter_sse()]
        # Ids are "<request id>:<n>": the two requests differ in the first part only.
        assert [(e.event, e.id.rpartition(":")[2]) for e in theirs] == [(e.event, e.id.rpartition(":")[2])
                                                                        for e in ours]
        strip = [{k: v for k, v in e.json().items() if k != "id"} for e in ours]
        assert [{k: v for k, v in e.json().items() if k != "id"} for e in theirs] == strip
        assert_clean(await server.settle())


async def test_leak_300_streams(tiny):
    """300 streams, up to 48 at once, batch limit 8: readers, FIN/RST droppers, slow readers dropped early."""
    rng = random.Random(27)
    plans = []
    for i in range(300):
        roll = rng.random()
        if roll < 0.35:
            plans.append(("reader", None, None, 0.0))
        elif roll < 0.85:
            plans.append(("dropper", rng.randint(0, 40), rng.choice(["fin", "rst"]), 0.0))
        else:
            plans.append(("slow", rng.choice([3, 10]), rng.choice(["fin", "rst"]), 0.02))
    slots = asyncio.Semaphore(48)
    outcomes: dict[str, tuple[str, int]] = {}

    async def client(server, plan) -> None:
        kind, after, how, pause_s = plan
        async with slots:
            ex, rid = await open_stream(server, {"prompt": PROMPT, "max_new_tokens": 48, "ignore_eos": True},
                                        rcvbuf=4096 if kind == "slow" else None)
            read = 0
            try:
                while not ex.ended and (after is None or read < after + 1):
                    events = await ex.read_events(1)
                    read += sum(e.event == "token" for e in events)
                    if pause_s:
                        await asyncio.sleep(pause_s)
            finally:
                ex.close(how or "fin")
            outcomes[rid] = (kind, read)

    with live_server(config(max_batch=8), tiny) as server:
        t0 = time.monotonic()
        await asyncio.wait_for(asyncio.gather(*(client(server, p) for p in plans)), 240)
        stats = await server.settle(30)
        elapsed = time.monotonic() - t0
        assert_clean(stats)
        assert stats["requests_accepted"] == 300 and len(outcomes) == 300
        releases = await server.get_json("/debug/releases")
        assert releases["ledger_problems_when_idle"] == []
        ids = [r["request_id"] for r in releases["releases"]]
        assert sorted(ids) == sorted(outcomes) and len(set(ids)) == 300  # each released exactly once
        left_early = sum(1 for r in releases["releases"] if r["reason"] == "cancelled")
        print(f"\nleak_300: {elapsed:.1f}s, {left_early} left early, late events dropped "
              f"{stats['late_events_dropped']}, tokens generated {stats['tokens_generated']}")


async def test_sigterm_ends_streams_after_the_grace_period_and_exits_clean(tmp_path):
    sock = __import__("socket").socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    proc = subprocess.Popen([sys.executable, "-m", "streamlab.cli", "serve", "--port", str(port),
                             "--graceful-timeout", "0.5", "--log-level", "info"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        for _ in range(600):
            try:
                probe = await RawExchange.open("127.0.0.1", port, "GET", "/healthz", timeout_s=1)
            except OSError:
                await asyncio.sleep(0.1)
                continue
            try:
                if (await probe.read_json())["status"] == "ok":
                    break
            finally:
                probe.close_fin()
        else:
            raise AssertionError("server did not become healthy")
        ex = await RawExchange.open("127.0.0.1", port, "POST", "/v1/stream", LONG)
        assert (await ex.read_events(2))[0].event == "start"
        proc.send_signal(signal.SIGTERM)
        rest = await ex.read_events(timeout_s=30)
        ex.close_fin()
        assert ex.ended and rest[-1].event == "error"
        assert rest[-1].json()["error"]["type"] == "shutting_down"
        output, _ = proc.communicate(timeout=30)
        # uvicorn re-raises the signal after its graceful shutdown, so the exit is "killed by SIGTERM".
        assert proc.returncode in (0, -signal.SIGTERM), output
        assert "streamlab: engine clean at shutdown" in output and "Traceback" not in output, output
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.communicate(timeout=10)
