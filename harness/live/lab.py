"""The chapter's wire and disconnect measurements, against `streamlab serve` in its own process.

  bytes      bytes per token event and per token of a whole stream
  disconnect release delay after FIN and RST at five moments; tokens generated per token
             read for abandoned streams, Starlette's response vs the write-only one

Delays use CLOCK_MONOTONIC on both sides (one machine): the client notes the moment it
closes, the server's hub notes the moment the sequence's blocks went back.
"""

from __future__ import annotations

import asyncio
import random
import statistics
import time
from dataclasses import dataclass

from harness.live.process import ServerProcess
from streamlab.idle import pool_whole

PROMPT = "Return the number of items in the container, or raise an error if it is closed."
MOMENTS = {"waiting_for_slot": 0, "after_admission": 1, "early": 5, "mid": 100, "late": 190}  # tokens read
MAX_NEW = 200


@dataclass
class DisconnectSample:
    how: str
    moment: str
    tokens_read: int
    completion_tokens: int
    delay_ms: float
    steps_after_close: int


async def _stream(server: ServerProcess, body: dict):
    ex = await server.request("POST", "/v1/stream", body)
    head = await ex.read_head()
    if head.status != 200:
        raise RuntimeError(f"stream refused: {head.status} {await ex.read_json()}")
    await ex.read_events(1)  # the start event
    return ex, head.headers["x-request-id"]


async def _read_tokens(ex, count: int) -> int:
    read = 0
    while read < count and not ex.ended:
        read += sum(e.event == "token" for e in await ex.read_events(1))
    return read


async def _release(server: ServerProcess, rid: str, deadline_s: float = 30.0) -> dict:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        for record in reversed((await server.get_json("/debug/releases"))["releases"]):
            if record["request_id"] == rid:
                return record
        await asyncio.sleep(0.01)
    raise RuntimeError(f"{rid} was not released within {deadline_s}s")


async def measure_bytes(model: str, tokens: int = 64) -> dict:
    async with ServerProcess(["--model", model, "--log-level", "warning"]) as server:
        ex = await server.request("POST", "/v1/stream", {"prompt": PROMPT, "max_new_tokens": tokens,
                                                         "ignore_eos": True})
        events = await ex.read_events()
        ex.close_fin()
    token_events = [e for e in events if e.event == "token"]
    # Each event's wire size: its fields as written (event, id, data lines) plus the blank line.
    sizes = [len(f"event: {e.event}\nid: {e.id}\ndata: {e.data}\n\n".encode()) for e in token_events]
    return {"tokens": len(token_events), "stream_bytes": len(ex.body),
            "bytes_per_token_event_median": statistics.median(sizes),
            "bytes_per_token_whole_stream": len(ex.body) / len(token_events)}


async def measure_disconnect(model: str, repetitions: int = 6, seed: int = 0) -> dict:
    samples: list[DisconnectSample] = []
    async with ServerProcess(["--model", model, "--max-batch", "1", "--log-level", "warning"]) as server:
        body = {"prompt": PROMPT, "max_new_tokens": MAX_NEW, "ignore_eos": True}
        for rep in range(repetitions):
            for how in ("fin", "rst"):
                for moment, after in MOMENTS.items():
                    blocker = None
                    if moment == "waiting_for_slot":
                        blocker, _ = await _stream(server, {**body, "max_new_tokens": 900})
                    ex, rid = await _stream(server, body)
                    read = await _read_tokens(ex, after)
                    closed = time.monotonic()
                    ex.close(how)
                    record = await _release(server, rid)
                    if blocker:
                        blocker.close_fin()
                    samples.append(DisconnectSample(how, moment, read, record["completion_tokens"],
                                                    (record["released_at"] - closed) * 1e3,
                                                    record["release_step"] - record["closed_after_step"]))
                    await server.settle()
        stats = await server.settle()
    waste = await measure_waste(model, seed=seed)
    by_how = {how: [s.delay_ms for s in samples if s.how == how] for how in ("fin", "rst")}
    return {
        "model": model, "repetitions": repetitions, "max_new_tokens": MAX_NEW,
        "samples": [vars(s) for s in samples],
        "release_delay_ms": {how: {"median": statistics.median(v), "max": max(v), "min": min(v)}
                             for how, v in by_how.items()},
        "max_steps_after_close": max(s.steps_after_close for s in samples),
        "never_admitted_when_waiting": all(s.completion_tokens == 0 for s in samples if s.moment == "waiting_for_slot"),
        "server_clean": pool_whole(stats),
        "waste": waste,
    }


async def measure_waste(model: str, streams: int = 48, seed: int = 0) -> dict:
    """Abandoned streams (clients leave after 0-20 tokens): generated per read, by response class."""
    out = {}
    for response_class in ("starlette", "write_only"):
        rng = random.Random(seed)
        generated = read_total = 0
        async with ServerProcess(["--model", model, "--lab", "--max-batch", "8", "--log-level", "warning"]) as server:
            slots = asyncio.Semaphore(8)

            async def client(i: int) -> tuple[str, int]:
                after, how = rng.randint(0, 20), rng.choice(["fin", "rst"])
                async with slots:
                    ex, rid = await _stream(server, {"prompt": PROMPT, "max_new_tokens": MAX_NEW, "ignore_eos": True,
                                                     "response_class": response_class})
                    read = await _read_tokens(ex, after)
                    ex.close(how)
                    return rid, read

            t0 = time.monotonic()
            results = await asyncio.gather(*(client(i) for i in range(streams)))
            await server.settle(120)
            elapsed = time.monotonic() - t0
            records = {r["request_id"]: r for r in (await server.get_json("/debug/releases"))["releases"]}
        for rid, read in results:
            generated += records[rid]["completion_tokens"]
            read_total += read
        out[response_class] = {"streams": streams, "tokens_generated": generated, "tokens_read": read_total,
                               "generated_per_read": generated / max(read_total, 1), "seconds": elapsed}
    return out


BUFFER_EVENT_BYTES = (133, 1024, 16384, 65536)


SMALL_RCVBUF = 65536
READ_WINDOW_RCVBUFS = (16384, 65536, 262144)  # not proportional: 24,576, 94,826 and 259,274... on one machine


def measure_read_window(rcvbuf: int = SMALL_RCVBUF, reads: int = 20, pause_s: float = 0.05) -> int:
    """Bytes one read returns from a receive buffer the sender keeps full, for a client with
    SO_RCVBUF `rcvbuf` that pauses between reads (a sleeper): the median over `reads` reads.
    A property of this kernel's TCP on loopback (the window it advertises for that buffer),
    so a plain socket pair measures it. 94,826 bytes for 64 KiB on the machine it was written on."""
    import socket
    import threading

    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def writer() -> None:
        conn, _ = listener.accept()
        chunk = b"x" * 65536
        with conn:
            while not stop.is_set():
                try:
                    conn.sendall(chunk)
                except OSError:
                    return

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    client = socket.socket()
    client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)  # before connect, as the harness does
    sizes = []
    try:
        client.connect(listener.getsockname())
        time.sleep(pause_s * 4)  # the first fill
        client.recv(1 << 22)  # the first read takes the window the handshake set, not the steady one
        for _ in range(reads):
            time.sleep(pause_s)
            sizes.append(len(client.recv(1 << 22)))
    finally:
        stop.set()
        client.close()
        listener.close()
        thread.join(5)
    return int(statistics.median(sizes))


async def measure_buffers(model: str, repetitions: int = 3) -> dict:
    """Bytes a client that never reads absorbs before the server's next write blocks.

    Measured with the default receive buffer and, for 64 KiB events, with SO_RCVBUF set to
    64 KiB (as slow-reader clients do): the difference tells the server's share apart.
    """
    rows = []
    async with ServerProcess(["--model", model, "--lab", "--log-level", "warning"]) as server:
        cases = [(size, None) for size in BUFFER_EVENT_BYTES] + [(65536, SMALL_RCVBUF)]
        for rep in range(repetitions):
            for size, rcvbuf in cases:
                key = f"{size}-{rcvbuf}-{rep}"
                flood = await server.request("GET", f"/lab/flood?event_bytes={size}&id={key}", rcvbuf=rcvbuf)
                accepted = None
                deadline = time.monotonic() + 20
                while accepted is None and time.monotonic() < deadline:
                    await asyncio.sleep(0.1)
                    ex = await server.request("GET", f"/lab/flood-result?id={key}")
                    try:
                        accepted = (await ex.read_json()).get("accepted_bytes")
                    finally:
                        ex.close_fin()
                flood.close_rst()
                rows.append({"event_bytes": size, "client_rcvbuf": rcvbuf, "repetition": rep,
                             "accepted_bytes": accepted})
    default = [r for r in rows if r["client_rcvbuf"] is None]
    by_size = {size: [r["accepted_bytes"] for r in default if r["event_bytes"] == size] for size in BUFFER_EVENT_BYTES}
    valid = [v for r in default if (v := r["accepted_bytes"]) is not None]
    small = [v for r in rows if r["client_rcvbuf"] == SMALL_RCVBUF and (v := r["accepted_bytes"]) is not None]
    return {"model": model, "rows": rows, "by_event_bytes": by_size,
            "read_window_bytes": [[rcvbuf, measure_read_window(rcvbuf)] for rcvbuf in READ_WINDOW_RCVBUFS],
            "median_accepted_bytes": statistics.median(valid) if valid else None,
            "with_64k_rcvbuf": small,
            # SO_RCVBUF is doubled by the kernel; what is left was held on the server's side.
            "server_side_bytes": max(0, statistics.median(small) - 2 * SMALL_RCVBUF) if small else None}
