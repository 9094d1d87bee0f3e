"""Trace (what happened), per-group figures, rendering and the JSON result. Passes no verdicts."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

from rich.table import Table

from harness.clients import StreamRecord


@dataclass
class Trace:
    scenario: str
    mode: str
    seed: int
    config: dict
    streams: list[StreamRecord]
    server: dict  # /stats after the run drained
    releases: list[dict]  # one record per request the engine ended
    invariants: list[str]
    ledger_problems: list[str]
    wall_s: float = 0.0
    duration_s: float = 0.0  # on the harness clock (virtual in simulation)
    notes: list[str] = field(default_factory=list)
    failure: str | None = None  # the server's step loop broke: its traceback
    steps: list[dict] = field(default_factory=list)  # the step loop's log (began, seconds, prefilled, decoded)
    step_timing: dict = field(default_factory=dict)  # simulation: real step times against the profile
    target: dict | None = None  # a target run: what was observed from outside (harness.target_watch)
    references: dict = field(default_factory=dict)  # stream index -> its request run alone through the target

    def to_json(self) -> str:
        data = asdict(self)
        # The only fields that are not a function of the scenario and seed in simulation.
        data.pop("wall_s")
        data.pop("step_timing")
        if self.mode == "sim":
            for step in data["steps"]:
                step.pop("cpu_s", None)  # the step thread's CPU time: the machine's, not the scenario's
        return json.dumps(data, indent=1, sort_keys=True, default=str)

    def group(self, name: str) -> list[StreamRecord]:
        return [s for s in self.streams if s.group == name]

    def release_by_request(self) -> dict[str, list[dict]]:
        out: dict[str, list[dict]] = {}
        for r in self.releases:
            out.setdefault(r["request_id"], []).append(r)
        return out


LEFT_BEHIND = ("blocks_reserved", "waiting", "running", "paused", "streams_registered")


def holds_nothing(trace: Trace) -> bool:
    """After the run drained: every block free, nothing waiting, running, paused or registered,
    no broken invariant."""
    s = trace.server
    return s["blocks_free"] == s["blocks_total"] and all(s[k] == 0 for k in LEFT_BEHIND) and not trace.invariants


def percentile(values: list[float], p: float) -> float | None:
    """Nearest-rank percentile; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def metric_values(streams: list[StreamRecord], metric: str) -> list[float]:
    if metric == "ttft_s":
        return [s.token_times[0] - s.sent_at for s in streams if s.token_times and s.sent_at is not None]
    if metric == "gap_s":
        return [b - a for s in streams for a, b in zip(s.token_times, s.token_times[1:])]
    if metric == "completion_s":
        return [s.ended_at - s.sent_at for s in streams if s.ended_at is not None and s.sent_at is not None]
    raise ValueError(f"unknown metric {metric}")


def meets_slo(s: StreamRecord, slo) -> bool:
    """Finished normally, first token within slo.ttft_ms, later tokens within slo.tpot_ms each on average."""
    if slo.relative:  # a multiple of a lone request's times: only a run's probe makes it milliseconds
        raise ValueError("an SLO relative to a lone request is judged as the run resolved it (report.group_slos)")
    if s.outcome not in ("length", "eos", "stop") or not s.token_times or s.sent_at is None or s.ended_at is None:
        return False
    ttft = s.token_times[0] - s.sent_at
    if slo.ttft_ms is not None and ttft * 1e3 > slo.ttft_ms:
        return False
    if slo.tpot_ms is not None and len(s.token_times) > 1:
        tpot = (s.token_times[-1] - s.token_times[0]) / (len(s.token_times) - 1)
        if tpot * 1e3 > slo.tpot_ms:
            return False
    return True


def goodput(streams: list[StreamRecord], slo) -> dict:
    """Requests that met the SLO: their count, their share of all requests, and per second of
    the group's span (first request sent to last request ended)."""
    sent = [s.sent_at for s in streams if s.sent_at is not None]
    ends = [t for s in streams for t in (s.ended_at, s.closed_at, s.head_at) if t is not None]
    span = (max(ends) - min(sent)) if sent and ends else 0.0
    good = sum(meets_slo(s, slo) for s in streams)
    return {"good": good, "requests": len(streams), "fraction": good / len(streams) if streams else 0.0,
            "span_s": span, "per_s": good / span if span > 0 else 0.0}


def outcomes(streams: list[StreamRecord]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for s in streams:
        counts[s.outcome] = counts.get(s.outcome, 0) + 1
    return dict(sorted(counts.items()))


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1e3:.1f}"


def group_table(trace: Trace) -> Table:
    table = Table(title=f"{trace.scenario} [{trace.mode}] seed {trace.seed}: {trace.duration_s:.2f}s on the "
                        f"harness clock, {trace.wall_s:.1f}s wall")
    for col in ("group", "n", "outcomes", "TTFT p50/p99 ms", "gap p50/p99 ms", "done p50/p99 ms", "tokens read"):
        table.add_column(col, justify="left" if col in ("group", "outcomes") else "right")
    slos = group_slos(trace)
    if slos:
        table.add_column("goodput", justify="right")
    names = list(dict.fromkeys(s.group for s in trace.streams))
    for name in names:
        streams = trace.group(name)
        cells = []
        for metric in ("ttft_s", "gap_s", "completion_s"):
            values = metric_values(streams, metric)
            cells.append(f"{_ms(percentile(values, 50))}/{_ms(percentile(values, 99))}")
        if slos:
            g = goodput(streams, slos[name]) if name in slos else None
            cells.append(f"{g['good']}/{g['requests']}, {g['per_s']:.2f}/s" if g else "-")
        table.add_row(name, str(len(streams)), ", ".join(f"{k} {v}" for k, v in outcomes(streams).items()),
                      *cells[:3], str(sum(len(s.token_times) for s in streams)), *cells[3:])
    return table


def group_slos(trace: Trace) -> dict:
    """The SLO of each group that declares one, from the scenario recorded on the trace."""
    from harness.scenario import Slo

    return {g["name"]: Slo.model_validate(g["slo"]) for g in trace.config.get("groups", []) if g.get("slo")}


def write_result(trace: Trace, checks: list, out_dir: Path, baseline_figures: dict | None = None) -> Path:
    """The run's JSON: its trace, its checks, and the figures a baseline would keep of it
    (`streamlab scenario baseline` reads them back)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{trace.scenario}-{trace.mode}.json"
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
    path = out_dir / f"{trace.scenario}-{trace.mode}.png"
    streams = trace.streams
    releases = {rid: recs[-1] for rid, recs in trace.release_by_request().items()}
    groups = list(dict.fromkeys(s.group for s in streams))
    colours = plt.get_cmap("tab10")
    fig, ax = plt.subplots(figsize=(10, max(3.0, min(0.08 * len(streams) + 1.5, 30))))
    for row, s in enumerate(streams):
        colour = colours(groups.index(s.group) % 10)
        if s.sent_at is not None:
            end = s.stopped_at or s.sent_at
            ax.hlines(row, s.sent_at, end, colors=colour, linewidth=0.6, alpha=0.4)
        if s.token_times:
            ax.plot(s.token_times, [row] * len(s.token_times), "|", color=colour, markersize=3)
        if s.closed_at is not None:
            ax.plot([s.closed_at], [row], "x", color="black", markersize=4)
        rel = releases.get(s.request_id or "")
        if rel is not None and rel.get("closed_at") is not None:
            ax.plot([rel["released_at"]], [row], "|", color="red", markersize=7)
    for i, g in enumerate(groups):
        ax.plot([], [], "|", color=colours(i % 10), label=g)
    ax.plot([], [], "x", color="black", label="client closed")
    ax.plot([], [], "|", color="red", label="released")
    ax.set_xlabel(f"seconds ({'virtual' if trace.mode == 'sim' else 'wall'} clock)")
    ax.set_ylabel("stream")
    ax.set_title(f"{trace.scenario} [{trace.mode}]")
    ax.legend(loc="upper right", fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def parity_table(rows: list[dict]) -> Table:
    table = Table(title="parity: live/sim p50 per group")
    for col in ("scenario", "group", "metric", "sim ms", "live ms", "live/sim", "bound"):
        table.add_column(col, justify="left" if col in ("scenario", "group", "metric") else "right")
    for r in rows:
        ratio = f"{r['ratio']:.2f}" if r["ok"] else f"[red]{r['ratio']:.2f}[/]"
        ratio += " (2 runs)" if len(r.get("ratios", ())) > 1 else ""
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
    return f"{label}: " + "; ".join(parts) + f"; {out} outside their bounds"
