"""The results page's sections on prefill scheduling, overload admission, bfloat16 identity and the harness
(its own speed and capacity), each from its section's JSON. The rest of the page is benchmarks/page.py."""

from __future__ import annotations

from benchmarks.tables import _ms, _spread, _table


PREFILL_NAMES = {"whole_first_token_per_prefill": "whole prompts, first token as soon as its own prefill pass ends",
                 "whole_first_token_per_step": "whole prompts, first tokens when the whole step ends (the chapter's lab)",
                 "whole_prefill_groups_of_8": "whole prompts, 8 prefills per step, first tokens at step end"}


def prefill_label(name: str, default_budget: int) -> str:
    if name in PREFILL_NAMES:
        return PREFILL_NAMES[name]
    budget = int(name.split("_")[1])
    return f"chunked, {budget}-token steps" + (" (default)" if budget == default_budget else "")


def prefill_section(c: dict | None) -> str:
    if not c:
        return ""
    rows = []
    for name, v in c["configs"].items():
        prefill_s = sorted(x["prefill_step_s"] for x in v["steps"])
        rows.append([prefill_label(name, c["default_budget"]), _spread(v["tokens_per_s"], digits=0),
                     _spread(v["ttft_p50_s"], 1e3, 0), _spread(v["ttft_p99_s"], 1e3, 0),
                     _spread(v["gap_p50_s"], 1e3, 0), _spread(v["gap_p99_s"], 1e3, 0),
                     f"{v['gap_p99_s']['median'] / v['gap_p50_s']['median']:.1f}x",
                     f"{prefill_s[len(prefill_s) // 2]:.2f}" if prefill_s else "n/a",
                     f"{v['identical']}/{v['streams']}"])
    reps = next(iter(c["configs"].values()))["repetitions"]
    return "\n".join([
        "## Prefill when 32 arrive together: chunked beside decode, or whole prompts", "",
        f"The overlap workload at 32 (all sent at once), each configuration on its own server, {reps} bursts. "
        f"Chunked: a step carries every running stream's decode token, then prompt chunks of {c['chunk_tokens']} "
        "tokens (cut at fixed multiples, so a stream stays identical to its solo run) up to the step token budget, "
        "all in one pass. Whole prompts: the mode before chunking, each admitted prompt prefilled whole before "
        "the step's decode. Prefill s: from the server's step log, seconds of the steps that carried prompt "
        "tokens, median burst.", "",
        _table(["configuration", "tokens/s", "TTFT p50 ms", "TTFT p99 ms", "gap p50 ms", "gap p99 ms",
                "gap p99/p50", "prefill s", "identical"], rows), "",
        "![prefill](results/prefill.png)", "",
        "With whole prompts, a stream whose first token came from the first prefill pass waits for every later "
        "pass before its second token: that wait is the gap p99. A chunked step bounds it by its budget: it costs "
        "about its decodes plus the budget's prompt rows. The price is the last first token: the same prompt "
        "work, spread over steps that also decode everyone already streaming, ends later, so the TTFT p99 grows "
        "as the budget shrinks. On 2 cores the prompt rows and the decode rows compete for the same arithmetic "
        "(the step at 32 already runs near this CPU's limit, see Step cost), so no budget gives both a gap p99 "
        "under 2x its p50 and the whole-prompt TTFT p99; the default is the largest budget whose gap p99 stayed "
        "under 2x in the sweep that chose it. For this workload alone, whole prompts with first tokens at the end "
        "of the step do give both (all 32 start in the same step, so nobody waits between tokens), but only "
        "because nothing was running when they came: a request that joins running streams then stalls every one "
        "of them for its whole prefill, which is what chunking removes.", ""])


def overload_section(o: dict | None) -> str:
    if not o:
        return ""
    rows = []
    for mode in ("sim", "live"):
        for rule in ("waiting_limit", "deadline"):
            f = o[mode][rule]
            outcomes = ", ".join(f"{k} {v}" for k, v in sorted(f["outcomes"].items()))
            rows.append([mode, rule.replace("_", " "), f"{f['good']}/{f['requests']}", f"{f['per_s']:.1f}",
                         _ms(f["ttft_p50_admitted_s"]), _ms(f["ttft_p99_admitted_s"]), outcomes])
    return "\n".join([
        "## Overload: the deadline gate against the waiting limit (exercise 5)", "",
        "`scenarios/overload_waiting_limit.yaml` and `overload_deadline.yaml`: the same 250 Poisson arrivals at "
        "100/s (about 2x the 42-57/s this 4-slot server sustains on `tiny`; at 1.5x the clients' own lag on the "
        "shared cores sometimes thinned the load below overload), prompts of 16 to 160 tokens, each "
        "asking for its first token within 300 ms and 25 ms per later token (the SLO). The waiting limit queues "
        "up to 64 and refuses the rest; the deadline gate refuses a request whose predicted first-token time is "
        "past its deadline (429 `deadline_unmeetable`) and drops one still waiting at its deadline. Goodput: "
        "requests that met the SLO, per second of the run; TTFT of the admitted requests. Each run in simulation "
        "and live.", "",
        _table(["mode", "admission", "met the SLO", "goodput /s", "TTFT p50 ms", "TTFT p99 ms", "outcomes"], rows),
        "", "![overload](results/overload.png)", "",
        "Refusing early is the point: under the waiting limit a request is admitted into a queue whose wait "
        "already exceeds its SLO, and the server's time goes to responses too late to count.", ""])


def soak_section(s: dict | None) -> str:
    if not s:
        return ""
    from benchmarks.soak import summary

    sizes = summary(s)
    mb = 2 ** 20
    rows = [["RSS MB", f"{sizes['rss_bytes']['start'] / mb:.0f}", f"{sizes['rss_bytes']['end'] / mb:.0f}",
             f"{sizes['rss_bytes']['max'] / mb:.0f}"]]
    for key, label in (("open_fds", "open descriptors"), ("loop_tasks", "event loop tasks"),
                       ("ledger_entries", "ledger entries"), ("streams", "hub streams"), ("releases", "release log"),
                       ("ended_remembered", "ended streams remembered"), ("engine_live", "engine requests")):
        rows.append([label, str(sizes[key]["start"]), str(sizes[key]["end"]), str(sizes[key]["max"])])
    tally = ", ".join(f"{k} {v}" for k, v in sorted(s["tally"].items()))
    return "\n".join([
        "## Soak: a long-running server", "",
        f"{s['streams']:,} streams against one `streamlab serve` (`tiny`, `--history {s['history']}`), at most "
        f"{s['concurrency']} at a time, in {s['duration_s']:.0f} s: {tally}. The server's /debug/sizes was read "
        "every second; start is after the first 20% of streams (warm-up), max is over the rest.", "",
        _table(["held", "start", "end", "max after warm-up"], rows), "",
        "![soak](results/soak.png)", "",
        f"Clean at the end: all blocks free and no double release: "
        f"{s['stats']['blocks_free'] == s['stats']['blocks_total'] and not s['stats']['double_release_attempts']}; "
        f"ledger problems: {len(s['ledger_problems_when_idle'])}.", ""])


def precision_section(p: dict | None) -> str:
    if not p:
        return ""
    rows = [[r["dtype"], r["sampling"], f"{r['identical']}/{p['streams']}", f"{r['together_s']:.1f}"]
            for r in p["runs"]]
    div = [[r["dtype"], r["sampling"], str(d["stream"]), str(d["token"]), str(d["solo"]), str(d["batched"]),
            f"{d['margin']:.3g}"] for r in p["runs"] for d in r["divergent"]]
    out = ["## Identity in bfloat16 (exercise 7)", "",
           f"The overlap workload ({p['streams']} prompts, {p['tokens']} tokens, all submitted at once) in-process "
           f"on `{p['model']}`, with `--dtype bfloat16` and with float32 (the default), greedy and seeded-sampled "
           "(temperature 0.8, top-p 0.95, a seed per stream), each stream against the same request alone.", "",
           _table(["dtype", "sampling", "identical to solo", "32 together s"], rows), ""]
    if div:
        out += ["Divergent streams: the first token that differs, and the top-2 logit margin of the solo run "
                "there (recomputed by one prefill over the context).", "",
                _table(["dtype", "sampling", "stream", "first divergent token", "solo", "batched", "top-2 margin"],
                       div), ""]
    else:
        out += ["No stream diverged, in either dtype, so there is no divergence to tabulate. The bfloat16 path "
                "keeps the float32 path's construction: every matrix product's rows padded to the row quantum "
                "probed for its own kernel and dtype, attention per sequence over its own context, prompt chunks "
                "at fixed boundaries. bfloat16 changes the numbers, not their independence from the batch; "
                "bfloat16 does not use the paged kernel (float32 only) and takes the gather path.", ""]
    return "\n".join(out)


def capacity_rows(rows: list[dict]) -> list[list[str]]:
    return [[str(r["clients"]), str(r["completed"]), f"{r['events_per_s_all_open']:,.0f} / {r['ideal_events_per_s']:,.0f}",
             f"{r['error_p50_ms']:.2f} / {r['error_p99_ms']:.2f} / {r['error_max_ms']:.1f}",
             f"{r['events_over_1ms'] * 100:.1f}%", f"{r['read_late_p50_ms']:.1f} / {r['read_late_p99_ms']:.1f}",
             f"{r['multi_event_reads'] * 100:.1f}%", f"{r['lag_p50_ms']:.1f} / {r['lag_p99_ms']:.1f}",
             f"{r['harness_cpu_us_per_event']:.0f} / {r['server_cpu_us_per_event']:.0f}"] for r in rows]


CAPACITY_HEAD = ["clients", "completed", "events/s all open / offered", "event time after arrival, at most: p50 / p99 / max ms",
                 "events over 1 ms", "read after arrival p50 / p99 ms", "reads with >1 event", "loop lag p50 / p99 ms",
                 "CPU µs per event: harness / server"]


def capacity_before_rows(rows: list[dict]) -> list[list[str]]:
    return [[str(r["clients"]), str(r["completed"]), f"{r['events_per_s_all_open']:,.0f} / {r['ideal_events_per_s']:,.0f}",
             f"{r['stamp_p50_ms']:.2f} / {r['stamp_p99_ms']:.2f} / {r['stamp_max_ms']:.1f}",
             f"{r['lag_p50_ms']:.1f} / {r['lag_p99_ms']:.1f}"] for r in rows]


CAPACITY_BEFORE_HEAD = ["clients", "completed", "events/s all open / offered",
                        "event time after arrival p50 / p99 / max ms", "loop lag p50 / p99 ms"]


def capacity_section(c: dict | None) -> str:
    """benchmarks/harness_capacity.py, a table per event loop; `before`: the same benchmark's JSON
    from the code before (benchmarks/capacity_before.json), if present."""
    if not c or not c.get("loops"):
        return ""
    before = c.get("before")
    loops = c["loops"]
    lines = [
        "## Harness capacity against the null server", "",
        f"One harness process's reader clients (the scenario harness's own: plan, launch, raw sockets, h11, the SSE "
        f"parser) against `streamlab serve --model null --null-step-ms {c['step_ms']:g}` in another process on the "
        f"same 2 cores: each client reads {c['tokens']} tokens, one event per stream per step, arrivals spread over "
        f"{c['arrival_s']:g} s. A client records an event at the kernel's receive stamp of the read that brought it "
        "(SO_TIMESTAMPNS), not when its loop got round to the read. *Event time after arrival, at most*: every "
        f"{c['sample_every']}th client keeps its reads, and each token's error is bounded from them: 0 where the read "
        "took that one event alone (its own segment's stamp); otherwise the stamp less the later of the previous "
        "read's start (which emptied the queue) and the server's wall clock as it wrote the event (the null model's "
        "`written_at`). *Read after arrival*: how late the loop got round to the read. *Events/s (all open)*: from "
        "the last arrival to the first stream's end. *CPU µs per event*: each process's CPU time over the events "
        "read (the server's from /proc). " + "; ".join(
            f"{'With' if i == 0 else 'with'} {name}'s loop it sustains **{got['sustained_clients']}** clients"
            for i, (name, got) in enumerate(loops.items()))
        + f", with that bound's p99 at or under {c['stamp_limit_ms']:g} ms and every stream complete (the largest "
        "count below the first over).", ""]
    for name, got in loops.items():
        lines += [f"{name}:", "", _table(CAPACITY_HEAD, capacity_rows(got["rows"])), ""]
    lines += [
        "How to read it: the stamp is exact while the loop reads each socket before that stream's next event "
        "arrives (one step later); a loop further behind than that reads two events at once, and the earlier one "
        "takes the later one's stamp (the kernel stamps a queue's merged segments with the last). So the error "
        "stays near zero until *read after arrival* nears the step, then jumps; *events/s all open* below *offered* "
        "is where this process and the server beside it (on the same cores) stop keeping up. The harness's CPU per "
        "event says what one core of harness carries with the server elsewhere (docs/SCALE.md).", ""]
    if before:
        lines += [f"Before ({before['code']}: each event recorded as its read returned, asyncio's loop, the read path "
                  f"before it was made cheaper; the same benchmark on this machine), the error was how late the read "
                  f"returned: **{before['sustained_clients']}** clients.", "",
                  _table(CAPACITY_BEFORE_HEAD, capacity_before_rows(before["rows"])), ""]
    return "\n".join(lines)


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
