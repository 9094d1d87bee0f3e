"""The results page's section for benchmarks/peer.py: ours and the peers, interleaved, equal threads.
Written into docs/RESULTS.md by a full run, or alone (`python -m benchmarks --only peer`)."""

from __future__ import annotations

from benchmarks.tables import _spread, _table

HEADING = "## Against the peers: interleaved, on equal threads"
NAMES = {"streamlab-openai": "ours, /v1/completions", "streamlab-stream": "ours, /v1/stream",
         "transformers-serve": "transformers serve", "llamacpp": "llama-server", "vllm": "vLLM (CPU)"}
# Issue 41's goals at 32 streams: ours over the peer, tokens/s at least; TTFT p50 at most.
GOALS_32 = {"llamacpp": (1.2, 1.0), "vllm": (1.2, None)}


def peer_section(p: dict | None) -> str:
    if not p or "ratios" not in p:
        return ""
    top, lone = str(max(p["levels"])), str(min(p["levels"]))
    out = [HEADING, "",
           f"Every server up at once, each with **{p['threads']} compute thread(s)** (one rule, "
           "`harness/machine/cores.py`: ours by OMP_NUM_THREADS, llama-server by `-t`, vLLM by its bound cores, "
           f"transformers serve by OMP_NUM_THREADS), prompt caches off. {p['rounds']} rounds; each round runs "
           "every level on every server, the order reversed every other round, so drift falls on all alike. Ours "
           "is asked on OpenAI's streaming `/v1/completions` as the peers are (and on `/v1/stream` beside it). "
           "A ratio is ours over the other within a round: its median [min–max] over the rounds. "
           "`benchmarks/peer.py`.", ""]
    rows = []
    for name, r in p["ratios"].items():
        for n in sorted(r, key=int):
            rows.append([NAMES.get(name, name), n, _spread(r[n]["tokens_per_s"]), _spread(r[n]["ttft_p50_s"]),
                         _spread(r[n]["gap_p50_s"])])
    out += [_table(["ours over", "streams", "tokens/s", "TTFT p50", "gap p50"], rows), ""]
    goals = []
    for name, (faster, sooner) in GOALS_32.items():
        r = p["ratios"].get(name, {}).get(top)
        if r:
            goals.append(f"{NAMES[name]} at {top}: tokens/s {r['tokens_per_s']['median']:.2f}x (goal ≥ {faster}x)"
                         + (f", TTFT p50 {r['ttft_p50_s']['median']:.2f}x (goal ≤ {sooner}x)" if sooner else ""))
    r1 = p["ratios"].get("llamacpp", {}).get(lone)
    if r1:
        goals.append(f"llama-server with one stream: tokens/s {r1['tokens_per_s']['median']:.2f}x (goal ≥ 1.0x)")
    b = p.get("bound") or {}
    ours_lv = {lv["n"]: lv for lv in p["ours"]["routes"]["streamlab-openai"]["levels"]}
    if b and int(top) in ours_lv:
        http = ours_lv[int(top)]["tokens_per_s"]["median"] / b["tokens_per_s"]["median"]
        goals.append(f"our HTTP tokens/s at {top} over our engine in-process on the same {b['threads']} thread(s): "
                     f"{http:.2f}x (goal ≥ 0.9x)")
    if b and int(lone) in ours_lv:
        gap = ours_lv[int(lone)]["gap_p50_s"]["median"] / b["batch_1_step_s"]["median"]
        goals.append(f"a lone stream's gap p50 over our batch-1 decode step in-process "
                     f"({b['batch_1_step_s']['median'] * 1e3:.1f} ms): {gap:.2f}x (goal ≤ 1.2x)")
    b2b = p.get("back_to_back")
    if b2b and int(top) in ours_lv:
        goals.append(f"back to back / {top} at once: {b2b['total_s'] / ours_lv[int(top)]['makespan_s']['median']:.1f}x "
                     "(goal ≥ 10x)")
    out += [f"- {g}" for g in goals] + [""]
    servers = [("streamlab", p["ours"], "`streamlab serve` (this tree)")] + [
        (name, peer, f"{peer['version']}: `{peer['command']}`") for name, peer in p["peers"].items()]
    rows = []
    for name, side, what in servers:
        routes = side["routes"]
        for route, kept in routes.items():
            for lv in kept["levels"]:
                rows.append([NAMES.get(route, route), str(lv["n"]), _spread(lv["tokens_per_s"], digits=0),
                             _spread(lv["ttft_p50_s"], 1e3, 0), _spread(lv["gap_p50_s"], 1e3, 1),
                             _spread(lv["gap_p99_s"], 1e3, 0)])
    out += ["Each server's own figures, median [min–max] over the rounds:", "",
            _table(["server", "streams", "tokens/s", "TTFT p50 ms", "gap p50 ms", "gap p99 ms"], rows), ""]
    for name, side, what in servers:
        read = side.get("threads_read")
        same = (f"; equal to our solo runs for {side['same_as_ours']} of {side['streams_compared']} streams at "
                f"{top} (by {side['compared_by']})" if "same_as_ours" in side else "")
        out.append(f"- {NAMES.get(name, name)}: {what}; threads read back: "
                   f"{read if read is not None else 'not reported'}; started in {side['start_s']:.0f} s{same}.")
    for name, why in p.get("missing", {}).items():
        out.append(f"- {NAMES.get(name, name)} did not run: {why}.")
    return "\n".join(out) + "\n"
