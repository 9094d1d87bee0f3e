"""Rich tables for benchmark results (pure formatting)."""

from __future__ import annotations

from rich.table import Table


def step_table(result: dict) -> Table:
    table = Table(title=f"decode step, {result['model']}, prompt {result['prompt_tokens']} tokens, "
                        f"median of {result['repeats']} x {result['steps']} steps")
    for col in ("batch", "paged ms", "contiguous ms", "paged/contiguous", "paged tok/s", "tok/s vs batch 1"):
        table.add_column(col, justify="right")
    for r in result["rows"]:
        table.add_row(str(r["batch"]), f"{r['paged_ms']:.2f}", f"{r['contiguous_ms']:.2f}",
                      f"{r['paged_over_contiguous']:.3f}", f"{r['paged_tokens_per_s']:.0f}",
                      f"{r['paged_throughput_vs_first']:.1f}x")
    return table


def disconnect_table(result: dict) -> Table:
    table = Table(title=f"release after a client leaves ({result['model']}, {result['repetitions']} repetitions)")
    for col in ("close", "moment", "median ms", "max ms", "max steps after close", "tokens generated (median)"):
        table.add_column(col, justify="right")
    samples = result["samples"]
    for how in ("fin", "rst"):
        for moment in dict.fromkeys(s["moment"] for s in samples):
            rows = [s for s in samples if s["how"] == how and s["moment"] == moment]
            delays = sorted(s["delay_ms"] for s in rows)
            table.add_row(how, moment, f"{delays[len(delays) // 2]:.1f}", f"{delays[-1]:.1f}",
                          str(max(s["steps_after_close"] for s in rows)),
                          str(sorted(s["completion_tokens"] for s in rows)[len(rows) // 2]))
    for cls, w in result["waste"].items():
        table.caption = (table.caption or "") + (f"{cls}: {w['generated_per_read']:.2f} tokens generated per token "
                                                 f"read over {w['streams']} abandoned streams; ")
    return table
