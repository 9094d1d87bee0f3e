"""The results page's sections on what clients do to a server (late joiners, slow readers,
disconnects, proxies), each from its section's JSON. The rest of the page is benchmarks/page.py."""

from __future__ import annotations

from benchmarks.tables import _ms, _r, _table


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
