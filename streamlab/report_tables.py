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
