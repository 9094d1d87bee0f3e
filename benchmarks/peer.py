"""Peer: ours and every installed peer, on the same weights, threads and route family, interleaved.

Every server is started once and stays up (an idle server costs nothing measurable here); then
each round runs every level on every server, the servers' order reversed every other round, so
drift on a shared machine falls on all of them alike. Each figure is a median over the rounds
with its spread, and each ratio (ours over a peer) is taken within a round, then its median and
spread over the rounds. Every level runs the same number of times on every server.

- Threads: every server the same number (serving_threads), by the harness's one rule
  (harness.machine.cores.thread_fill): ours by OMP_NUM_THREADS, llama-server by `-t`, vLLM by its
  bound cores, transformers serve by OMP_NUM_THREADS; each server's count is read back where it
  reports it (our /debug/sizes, llama-server's and vLLM's logs).
- Route: ours on OpenAI's streaming /v1/completions, as the peers are asked (the headline), and
  on /v1/stream beside it.
- Prompt caches off (benchmarks.servers.NO_PROMPT_CACHE): the same prompts recur every round.
- Identity: each stream at 32 against our own solo run of the same prompt (back to back, once),
  by token ids where the server sends them, else by text.
- The in-process bound: our engine on the same work with the same threads, no HTTP.

Runs alone: `python -m benchmarks --only peer` needs no other section's results.
"""

from __future__ import annotations

import os
import re
import time
from contextlib import contextmanager
from pathlib import Path

from benchmarks.common import spread
from benchmarks.overlap import (LEVELS, MAX_TOKENS, MODEL, back_to_back, by_level, engine_steps, ours, summarize_burst,
                                workload)
from benchmarks.servers import PEERS, peer_command, peer_missing, peer_server, peer_version
from benchmarks.streams import STREAMLAB, Api, burst, peer_api
from harness.clients.wire import wire_for
from harness.machine.cores import server_threads, torch_threads
from streamlab.idle import pool_whole
from streamlab.models import load_model

OURS_OPENAI = Api("streamlab-openai", wire_for("openai-completions", MODEL, {}, "field"))
# Where a peer says how many threads it computes on (its log, as it starts).
THREADS_SAID = {"llamacpp": re.compile(r"n_threads = (\d+)"),
                "vllm": re.compile(r"local_rank=0, core ids=\[([0-9, ]*)\]")}


def threads_read_back(name: str, log: str) -> int | None:
    """The compute threads a peer reports in its log, or None where it says nothing."""
    found = THREADS_SAID.get(name) and THREADS_SAID[name].search(log)
    if not found:
        return None
    return int(found.group(1)) if name == "llamacpp" else len([c for c in found.group(1).split(",") if c.strip()])


def serving_threads() -> int:
    """The compute threads every server gets here: what `streamlab serve` uses by default (torch's
    default, a thread per core). Measured on this 2-core machine in one interleaved run (3 rounds):
    ours on 2 threads against 1 made 1.22x the tokens/s of one stream and 1.29x at 32, and
    llama-server's -t 2 against -t 1 1.12x and 1.71x; so every server gets what serves it best
    here, and the same. (A live scenario's server keeps one: harness.machine.cores says why.)
    STREAMLAB_BENCH_THREADS=N overrides it."""
    return int(os.environ.get("STREAMLAB_BENCH_THREADS") or len(os.sched_getaffinity(0)))


@contextmanager
def threads_for_every_server(threads: int):
    """Servers started inside get `threads` by the harness's one rule (harness.machine.cores)."""
    before = os.environ.get("STREAMLAB_SERVER_THREADS")
    os.environ["STREAMLAB_SERVER_THREADS"] = str(threads)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("STREAMLAB_SERVER_THREADS")
        else:
            os.environ["STREAMLAB_SERVER_THREADS"] = before


async def run(reps: int, log_dir: Path, say, levels: tuple[int, ...] = LEVELS) -> dict:
    threads = serving_threads()
    with threads_for_every_server(threads):
        assert server_threads() == threads
        return await _run(reps, log_dir, say, levels, threads)


async def _run(reps: int, log_dir: Path, say, levels: tuple[int, ...], threads: int) -> dict:
    prompts = workload()
    out: dict = {"threads": threads, "levels": list(levels), "rounds": reps, "missing": {}, "peers": {}}
    servers: dict[str, tuple[Api, int]] = {}
    started = []
    try:
        own = ours(MODEL, log_dir=log_dir)
        t0 = time.monotonic()
        server = await own.__aenter__()
        started.append(own)
        out["ours"] = {"start_s": time.monotonic() - t0,
                       "threads_read": (await server.get_json("/debug/sizes")).get("torch_threads")}
        servers["streamlab-openai"] = (OURS_OPENAI, server.port)
        servers["streamlab-stream"] = (STREAMLAB, server.port)
        for name in PEERS:
            missing = peer_missing(name)
            if missing:
                say(f"peer {name}: skipped, {missing}")
                out["missing"][name] = missing
                continue
            t0 = time.monotonic()
            process, model = peer_server(name, MODEL, 32, log_dir)
            peer = await process.__aenter__()
            started.append(process)
            out["peers"][name] = {"start_s": time.monotonic() - t0, "command": " ".join(peer_command(name)),
                                  "version": peer_version(name), "model": MODEL,
                                  "threads_read": threads_read_back(name, peer.log_path.read_text(errors="replace"))}
            servers[name] = (peer_api(name, model), peer.port)
        for api, port in servers.values():  # warm-up: transformers serve's manager starts on first use
            await burst(api, port, prompts[:4], 4)
        say("ours: back-to-back (32 solo streams, the identity reference)")
        out["back_to_back"], solo = await back_to_back(OURS_OPENAI, server.port, prompts)
        rows: dict[str, list[dict]] = {name: [] for name in servers}
        at_32: dict[str, list] = {}
        for r in range(reps):
            say(f"round {r + 1} of {reps}")
            for n in levels:
                order = list(servers) if r % 2 == 0 else list(reversed(servers))
                for name in order:
                    api, port = servers[name]
                    makespan, streams = await burst(api, port, prompts[:n], MAX_TOKENS)
                    rows[name].append({**summarize_burst(n, makespan, streams, solo), "round": r})
                    if n == max(levels):
                        at_32[name] = streams
        out["settled_clean"] = pool_whole(await server.settle())
    finally:
        for process in reversed(started):
            await process.__aexit__(None, None, None)
    for name, kept in rows.items():
        side = out["ours"] if name.startswith("streamlab") else out["peers"][name]
        side.setdefault("routes", {})[name] = {"rows": kept, "levels": by_level(kept)}
    for name, peer in out["peers"].items():
        peer["rows"], peer["levels"] = peer["routes"][name]["rows"], peer["routes"][name]["levels"]
        streams = at_32.get(name, [])
        by_ids = bool(streams) and all(s.token_ids for s in streams)
        peer["same_as_ours"] = sum((s.token_ids == solo[s.prompt_index].token_ids) if by_ids
                                   else (s.text == solo[s.prompt_index].text) for s in streams)
        peer["compared_by"], peer["streams_compared"] = "token ids" if by_ids else "text", len(streams)
    out["ratios"] = {name: ratios(rows["streamlab-openai"], rows[name]) for name in out["peers"]}
    out["ratios"]["streamlab-stream"] = ratios(rows["streamlab-openai"], rows["streamlab-stream"])
    out["bound"] = engine_bound(prompts, threads)
    return out


def ratios(ours_rows: list[dict], theirs: list[dict]) -> dict[str, dict]:
    """Per level: ours over theirs within each round (tokens/s, TTFT p50, gap p50), then the spread."""
    out = {}
    for n in sorted({r["n"] for r in ours_rows}):
        pairs = [(a, b) for a in ours_rows for b in theirs if a["n"] == b["n"] == n and a["round"] == b["round"]]
        out[str(n)] = {key: spread([a[key] / b[key] for a, b in pairs])
                       for key in ("tokens_per_s", "ttft_p50_s", "gap_p50_s")}
    return out


def engine_bound(prompts: list[str], threads: int) -> dict:
    """Our engine in this process on the servers' threads, no HTTP: the 32-stream work (HTTP's
    cost apart), and one stream alone (its decode step: what a lone stream's gap could be)."""
    loaded = load_model(MODEL)
    with torch_threads(threads):
        seconds = [engine_steps(prompts, loaded)[0] for _ in range(2)]
        alone = [s for _ in range(2) for s in engine_steps(prompts[:1], loaded)[1]]
    return {"threads": threads, "seconds": spread(seconds),
            "tokens_per_s": spread([len(prompts) * MAX_TOKENS / s for s in seconds]),
            "batch_1_step_s": spread(alone)}

