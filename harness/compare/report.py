"""A comparison's result, four ways: a table in the terminal, JSON, Markdown a CI job can post,
and a plot of both sides' rounds per figure. The verdict and its exit code are decided here once."""

from __future__ import annotations

import json
import math
from pathlib import Path

from rich.table import Table

from harness.compare.gate import ScenarioGate, Settings

PASS, REGRESSION, COULD_NOT_RUN = 0, 1, 2  # the exit codes


def exit_code(gates: list[ScenarioGate]) -> int:
    """2 where a scenario could not run on both sides; 1 where a run broke a non-timing check or a
    figure regressed."""
    if any(g.refused for g in gates):
        return COULD_NOT_RUN
    if any(g.outcomes_broken or any(j.verdict == "regression" for j in g.judged) for g in gates):
        return REGRESSION
    return PASS


def headline(gates: list[ScenarioGate], labels: tuple[str, str]) -> str:
    judged = [j for g in gates for j in g.judged]
    regressions = [f"{g.scenario} {j.figure} {j.effect:.2f}x" for g in gates for j in g.judged if j.verdict == "regression"]
    improvements = sum(j.verdict == "improvement" for j in judged)
    refused = [f"{g.scenario}: {g.refused}" for g in gates if g.refused]
    broken = [f"{g.scenario} (on the {' and the '.join(g.broken_sides())} side)" for g in gates if g.outcomes_broken]
    head = f"could not run {'; '.join(refused)}; " if refused else ""
    head += f"outcomes broken in {', '.join(broken)}; " if broken else ""
    if labels[0] == labels[1]:
        flagged = len(regressions) + improvements
        return (f"{head}A/A: {flagged} of {len(judged)} figures flagged (false alarms), "
                f"{len(regressions)} as regressions")
    if regressions:
        return f"{head}regression in {len(regressions)} of {len(judged)} figures: " + "; ".join(regressions[:8])
    return f"{head}no regression in {len(judged)} figures; {improvements} improved"


def shown(figure: str, value: float) -> str:
    """A median as the table shows it: milliseconds, or tokens per second."""
    if value != value:  # NaN: no round had it
        return "-"
    return f"{value:.0f} tok/s" if figure.endswith("per_s") else f"{value * 1e3:.1f} ms"


def table(gates: list[ScenarioGate], labels: tuple[str, str]) -> Table:
    t = Table(title=f"compare: baseline {labels[0]} / candidate {labels[1]}")
    for col in ("scenario", "figure", "baseline", "candidate", "cand/base", "CI", "p", "verdict"):
        t.add_column(col, justify="right" if col not in ("scenario", "figure", "verdict") else "left")
    for g in gates:
        for j in g.judged:
            colour = {"regression": "red", "improvement": "green"}.get(j.verdict, "")
            t.add_row(g.scenario, j.figure, shown(j.figure, j.baseline), shown(j.figure, j.candidate),
                      f"{j.effect:.3f}", f"{j.low:.2f}-{j.high:.2f}", f"{j.p:.3g}",
                      f"[{colour}]{j.verdict}[/]" if colour else j.verdict)
    return t


def finite(value):
    """JSON has no NaN: a figure no round had is null."""
    return None if isinstance(value, float) and value != value else value


def as_json(gates: list[ScenarioGate], labels: tuple[str, str], settings: Settings) -> dict:
    return {"baseline": labels[0], "candidate": labels[1], "settings": vars(settings),
            "exit_code": exit_code(gates), "headline": headline(gates, labels),
            "scenarios": [{"scenario": g.scenario, "refused": g.refused,
                           "outcomes": {"baseline": g.baseline.broken, "candidate": g.candidate.broken},
                           "wall_s": {"baseline": round(g.baseline.wall_s, 1), "candidate": round(g.candidate.wall_s, 1)},
                           "figures": [{k: finite(v) for k, v in j.as_dict().items()} for j in g.judged],
                           "dropped": g.dropped, "notes": g.notes,
                           "rounds": {"baseline": g.baseline.figures, "candidate": g.candidate.figures},
                           "smallest_detectable": g.detectable} for g in gates]}


def markdown(gates: list[ScenarioGate], labels: tuple[str, str], settings: Settings) -> str:
    mark = {0: "passed", 1: "FAILED", 2: "could not run"}[exit_code(gates)]
    lines = [f"### streamlab scenario compare: {mark}", "",
             f"Baseline `{labels[0]}`, candidate `{labels[1]}`; {settings.rounds} rounds ({settings.order}), "
             f"alpha {settings.alpha:g}, threshold {settings.threshold:.0%}.", "", headline(gates, labels), ""]
    broken = [f"- {g.scenario} {side}: {b}" for g in gates
              for side, runs in (("baseline", g.baseline), ("candidate", g.candidate)) for b in runs.broken]
    if broken:
        lines += ["Outcomes (any broken check fails the gate, whatever the figures say):", "", *broken, ""]
    aside = [f"- {g.scenario}: {d}" for g in gates for d in g.notes + g.dropped]
    if aside:
        lines += ["Not judged, or judged with a note:", "", *aside, ""]
    lines += ["| scenario | figure | baseline | candidate | cand/base (CI) | p | verdict |",
              "|---|---|---:|---:|---:|---:|---|"]
    for g in gates:
        for j in g.judged:
            verdict = f"**{j.verdict}**" if j.verdict != "same" else "same"
            lines.append(f"| {g.scenario} | {j.figure} | {shown(j.figure, j.baseline)} | {shown(j.figure, j.candidate)} | "
                         f"{j.effect:.3f} ({j.low:.2f}-{j.high:.2f}) | {j.p:.3g} | {verdict} |")
    detectable = [(g.scenario, f, d) for g in gates for f, d in g.detectable.items()]
    if detectable:
        lines += ["", "Smallest slowdown each figure's noise lets this gate catch with these rounds (A/A):", ""]
        lines += [f"- {s} {f}: {d:.2f}x" if d else f"- {s} {f}: not within 3x" for s, f, d in detectable]
    return "\n".join(lines) + "\n"


def plot(gates: list[ScenarioGate], labels: tuple[str, str], path: Path) -> Path:
    """Both sides' round values per figure, one panel each (median lines drawn)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [(g, j) for g in gates for j in g.judged]
    cols = min(4, max(1, len(panels)))
    rows = max(1, math.ceil(len(panels) / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.6 * rows), squeeze=False)
    for ax in axes.flat[len(panels):]:
        ax.set_visible(False)
    for ax, (g, j) in zip(axes.flat, panels):
        scale = 1 if j.figure.endswith("per_s") else 1e3  # tokens/s as they are, seconds as ms
        for x, (side, runs) in enumerate((("baseline", g.baseline), ("candidate", g.candidate))):
            values = [f[j.figure] * scale for f in runs.figures if j.figure in f]
            ax.scatter([x + (i % 5 - 2) * 0.04 for i in range(len(values))], values, s=10)
            ax.hlines(sorted(values)[len(values) // 2], x - 0.25, x + 0.25)
        ax.set_xticks([0, 1], ["base", "cand"])
        ax.set_title(f"{g.scenario}\n{j.figure} ({j.verdict})", fontsize=7)
        ax.tick_params(labelsize=7)
    fig.suptitle(f"{labels[0]} / {labels[1]}", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def write(gates: list[ScenarioGate], labels: tuple[str, str], settings: Settings, out: Path) -> list[Path]:
    """compare.json, compare.md and compare.png under `out`."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "compare.png").unlink(missing_ok=True)  # no plot from an earlier gate beside this one's results
    paths = [out / "compare.json", out / "compare.md"]
    paths[0].write_text(json.dumps(as_json(gates, labels, settings), indent=1, default=float) + "\n")
    paths[1].write_text(markdown(gates, labels, settings))
    if any(g.judged for g in gates):
        paths.append(plot(gates, labels, out / "compare.png"))
    return paths
