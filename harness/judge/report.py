"""A run rendered: per-group tables, the JSON result, timelines, the parity table. The data itself
is harness/record/trace.py; verdicts are the checks'."""

from __future__ import annotations

import json
import re
from dataclasses import asdict
from pathlib import Path

from rich.table import Table

from harness.record.trace import Trace, goodput, metric_values, outcomes, percentile


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1e3:.1f}"


def group_table(trace: Trace) -> Table:
    table = Table(title=f"{trace.scenario} [{trace.mode}] seed {trace.seed}: {trace.duration_s:.2f}s on the "
                        f"harness clock, {trace.wall_s:.1f}s wall")
    lag = trace.loop_lag_ms
    if lag:
        table.caption = f"client loop lag p50/p99/max {lag['p50']:.1f}/{lag['p99']:.1f}/{lag['max']:.1f} ms"
    for col in ("group", "n", "outcomes", "TTFT p50/p99 ms", "gap p50/p99 ms", "done p50/p99 ms", "tokens read",
                "sent late p50/p99/max ms", "TTFT from plan p50/p99 ms"):
        table.add_column(col, justify="left" if col in ("group", "outcomes") else "right")
    slos = trace.spec.slos() if trace.spec is not None else {}
    if slos:
        table.add_column("goodput", justify="right")
    names = list(dict.fromkeys(s.group for s in trace.streams))
    for name in names:
        streams = trace.group(name)
        cells = []
        for metric in ("ttft_s", "gap_s", "completion_s"):
            values = metric_values(streams, metric)
            cells.append(f"{_ms(percentile(values, 50))}/{_ms(percentile(values, 99))}")
        late = metric_values(streams, "send_lateness_s")
        planned = metric_values(streams, "ttft_planned_s")
        cells.append(f"{_ms(percentile(late, 50))}/{_ms(percentile(late, 99))}/{_ms(max(late, default=None))}")
        cells.append(f"{_ms(percentile(planned, 50))}/{_ms(percentile(planned, 99))}")
        if slos:
            g = goodput(streams, slos[name]) if name in slos else None
            cells.append(f"{g['good']}/{g['requests']}, {g['per_s']:.2f}/s" if g else "-")
        table.add_row(name, str(len(streams)), ", ".join(f"{k} {v}" for k, v in outcomes(streams).items()),
                      *cells[:3], str(sum(len(s.token_times) for s in streams)), *cells[3:])
    return table


def result_stem(trace: Trace) -> str:
    """A run's result files' name: a URL target's mode (live@http://127.0.0.1:8000) made one
    file name."""
    return re.sub(r"[^\w.@-]+", "_", f"{trace.scenario}-{trace.mode}")


def write_result(trace: Trace, checks: list, out_dir: Path, baseline_figures: dict | None = None) -> Path:
    """The run's JSON: its trace, its checks, and the figures a baseline would keep of it
    (`streamlab scenario baseline` reads them back)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{result_stem(trace)}.json"
    data = json.loads(trace.to_json())
    data["wall_s"] = trace.wall_s
    data["step_timing"] = trace.step_timing
    if baseline_figures is not None:
        data["baseline_figures"] = baseline_figures
    data["checks"] = [asdict(c) for c in checks]
    path.write_text(json.dumps(data, indent=1) + "\n")
    return path


def timeline_png(trace: Trace, out_dir: Path) -> Path:
    """One row per stream: tokens over time, the client's close (x) and the release (|) marked."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{result_stem(trace)}.png"
    streams = trace.streams
    releases = {rid: recs[-1] for rid, recs in trace.release_by_request().items()}
    groups = list(dict.fromkeys(s.group for s in streams))
    colours = plt.get_cmap("tab10")
    fig, ax = plt.subplots(figsize=(10, max(3.0, min(0.08 * len(streams) + 1.5, 30))))
    # One artist per group and kind, not per stream: the same marks, drawn in a fraction of the
    # time (a suite draws one of these for every run).
    closed: tuple[list, list] = ([], [])
    released: tuple[list, list] = ([], [])
    for i, g in enumerate(groups):
        rows = [(row, s) for row, s in enumerate(streams) if s.group == g]
        spans = [(row, s.sent_at, s.stopped_at or s.sent_at) for row, s in rows if s.sent_at is not None]
        if spans:
            ax.hlines(*zip(*spans), colors=colours(i % 10), linewidth=0.6, alpha=0.4)
        ticks = [(t, row) for row, s in rows for t in s.token_times]
        ax.plot([t for t, _ in ticks], [r for _, r in ticks], "|", color=colours(i % 10), markersize=3, label=g)
        for row, s in rows:
            if s.closed_at is not None:
                closed[0].append(s.closed_at)
                closed[1].append(row)
            rel = releases.get(s.request_id or "")
            if rel is not None and rel.get("closed_at") is not None:
                released[0].append(rel["released_at"])
                released[1].append(row)
    ax.plot(*closed, "x", color="black", markersize=4, label="client closed")
    ax.plot(*released, "|", color="red", markersize=7, label="released")
    ax.set_xlabel(f"seconds ({'virtual' if trace.mode == 'sim' else 'wall'} clock)")
    ax.set_ylabel("stream")
    ax.set_title(f"{trace.scenario} [{trace.mode}]")
    ax.legend(loc="upper right", fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def parity_table(rows: list[dict]) -> Table:
    table = Table(title="parity: live/sim per group (interquartile means; harness.judge.timing.typical)")
    for col in ("scenario", "group", "metric", "sim ms", "live ms", "live/sim", "bound"):
        table.add_column(col, justify="left" if col in ("scenario", "group", "metric") else "right")
    for r in rows:
        ratio = f"{r['ratio']:.2f}" if r["ok"] else f"[red]{r['ratio']:.2f}[/]"
        ratio += f" ({len(r['ratios'])} runs)" if len(r.get("ratios", ())) > 1 else ""
        if (late := r.get("late_by_a_pause")) is not None:
            ratio += f" (run {late['run']}: {late['ratio']:.2f}, less a {late['pause_s'] * 1e3:.1f} ms pause)"
        table.add_row(r["scenario"], r["group"], r["metric"], _ms(r["sim_s"]), _ms(r["live_s"]), ratio,
                      f"{r['low']:g}-{r['high']:g}")
    return table


def parity_summary(rows: list[dict], label: str = "parity spread") -> str:
    """min / median / max of the ratios per metric, and how many are out of bounds."""
    parts = []
    for metric in ("ttft_s", "completion_s"):
        ratios = sorted(r["ratio"] for r in rows if r["metric"] == metric)
        if ratios:
            parts.append(f"{metric} live/sim min {ratios[0]:.2f} median {ratios[len(ratios) // 2]:.2f} "
                         f"max {ratios[-1]:.2f} over {len(ratios)} groups")
    out = sum(not r["ok"] for r in rows)
    paused = sum(r.get("late_by_a_pause") is not None for r in rows)
    return (f"{label}: " + "; ".join(parts) + f"; {out} outside their bounds"
            + (f" ({paused} more past them by no more than one machine pause)" if paused else ""))
