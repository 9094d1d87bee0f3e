"""Soak: one long-running server, a mixed population, and everything it holds sampled throughout.

`streams` requests on `tiny`, at most `concurrency` at a time, each client one of: a reader
(to the end), a dropper (leaves after a random number of tokens, FIN or RST), a slow reader
(pauses between reads), a bad request (malformed JSON), and a reconnector (leaves, comes back
with Last-Event-ID and reads to the end). Every `sample_s` the server's /debug/sizes is read:
its per-stream collections, the ledger, the event loop's tasks, RSS and open descriptors. A
long-running server must hold them flat after warm-up; `history` bounds the per-request records.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
import time

from harness.live.process import ServerProcess
from harness.clients.rawhttp import RawExchange

KINDS = (("reader", 0.45), ("dropper", 0.2), ("slow", 0.1), ("bad", 0.1), ("reconnector", 0.15))
DEADLINE_S = 30.0  # one client's longest wait for anything (every loop here is bounded)


async def one_client(port: int, kind: str, rng: random.Random, tally: Counter) -> None:
    body = {"prompt": f"Return the value {rng.randrange(1000)}", "max_new_tokens": rng.randint(4, 24),
            "ignore_eos": True}
    if kind == "bad":
        ex = await RawExchange.open("127.0.0.1", port, "POST", "/v1/stream", b'{"prompt": ',
                                    {"content-type": "application/json"})
        head = await ex.read_head(DEADLINE_S)
        await ex.read_body(DEADLINE_S)
        ex.close_fin()
        tally[f"bad_{head.status}"] += 1
        return
    ex = await RawExchange.open("127.0.0.1", port, "POST", "/v1/stream", body)
    head = await ex.read_head(DEADLINE_S)
    if head.status != 200:
        ex.close_fin()
        tally[f"refused_{head.status}"] += 1
        return
    last_id = None
    leave_after = rng.randint(0, body["max_new_tokens"])
    tokens = 0
    while not ex.ended:
        events = await ex.read_events(1, DEADLINE_S)
        for ev in events:
            last_id = ev.id or last_id
            tokens += ev.event == "token"
        if kind == "slow":
            await asyncio.sleep(0.01)
        if kind in ("dropper", "reconnector") and tokens >= leave_after and not ex.ended:
            break
    if ex.ended:
        ex.close_fin()
        tally[kind] += 1
        return
    ex.close("rst" if kind == "dropper" and rng.random() < 0.5 else "fin")
    if kind == "dropper":
        tally["dropper"] += 1
        return
    again = await RawExchange.open("127.0.0.1", port, "POST", "/v1/stream", b"", {"last-event-id": last_id or ""})
    head = await again.read_head(DEADLINE_S)
    while head.status == 200 and not again.ended:
        await again.read_events(None, DEADLINE_S)
    again.close_fin()
    # 410: it had read the last event already (a completed stream replays an unread tail for the window).
    key = "reconnector" if head.status == 200 else f"resume_{head.status}"
    tally[key] += 1


async def soak(streams: int, history: int, concurrency: int = 32, sample_s: float = 1.0, say=print,
               seed: int = 0) -> dict:
    rng = random.Random(seed)
    kinds = rng.choices([k for k, _ in KINDS], [w for _, w in KINDS], k=streams)
    tally: Counter[str] = Counter()
    samples: list[dict] = []
    args = ["--model", "tiny", "--log-level", "warning", "--max-batch", "32", "--waiting-limit", "256",
            "--resume-window", "5", "--history", str(history)]
    async with ServerProcess(args) as server:
        t0 = time.monotonic()
        done = 0

        async def sampler() -> None:
            while True:
                sizes = await server.get_json("/debug/sizes")
                samples.append({"t": time.monotonic() - t0, "done": done, **sizes})
                await asyncio.sleep(sample_s)

        sampling = asyncio.create_task(sampler())
        slots = asyncio.Semaphore(concurrency)

        async def run(i: int) -> None:
            nonlocal done
            async with slots:
                try:
                    await asyncio.wait_for(one_client(server.port, kinds[i], random.Random(seed * 100_003 + i), tally),
                                           DEADLINE_S * 3)
                except (OSError, asyncio.TimeoutError, ConnectionError) as exc:
                    tally[f"client_error_{type(exc).__name__}"] += 1
                done += 1
                if done % max(1, streams // 10) == 0:
                    say(f"soak: {done}/{streams} streams, {time.monotonic() - t0:.0f} s")

        await asyncio.gather(*(run(i) for i in range(streams)))
        stats = await server.settle()
        final = await server.get_json("/debug/sizes")
        samples.append({"t": time.monotonic() - t0, "done": done, **final})
        sampling.cancel()
        releases = await server.get_json("/debug/releases")
    return {"streams": streams, "history": history, "concurrency": concurrency, "duration_s": time.monotonic() - t0,
            "tally": dict(tally), "samples": samples, "stats": stats,
            "ledger_problems_when_idle": releases["ledger_problems_when_idle"]}


def summary(result: dict, warm_fraction: float = 0.2) -> dict:
    """Start (after warm-up) and end of each sampled size, and the largest value seen after warm-up."""
    samples = result["samples"]
    warm = [s for s in samples if s["done"] >= warm_fraction * result["streams"]] or samples
    keys = [k for k in samples[-1] if k not in ("t", "done")]
    return {k: {"start": warm[0].get(k), "end": samples[-1].get(k), "max": max(s.get(k, 0) for s in warm)}
            for k in keys}


def run(say) -> dict:
    return asyncio.run(soak(20_000, history=2_000, say=say))
