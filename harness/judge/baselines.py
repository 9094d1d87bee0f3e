"""scenarios/baselines.json: the committed figures the regression gate (harness.judge.timing.regression)
compares with, read and written here, and what a baseline keeps of a run, in which units
(baseline_figures). `streamlab scenario suite --update-baseline` refreshes the file.
"""

from __future__ import annotations

import json
from pathlib import Path

from harness.record.trace import Trace, metric_values, percentile

BASELINES = Path(__file__).resolve().parents[2] / "scenarios" / "baselines.json"


def load_baselines(path: Path = BASELINES) -> dict:
    return json.loads(path.read_text()) if path.exists() else {}


def save_baselines(data: dict, path: Path = BASELINES) -> None:
    path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")


def figures_from_results(results_dir: Path) -> dict:
    """Baselines from the JSON results of passing runs already on disk (no re-run): each result
    carries the figures its run would commit (harness.judge.timing.baseline_figures)."""
    out: dict = {}
    for path in sorted(results_dir.glob("*-*.json")):
        data = json.loads(path.read_text())
        if "baseline_figures" not in data or data["mode"] not in ("sim", "live"):
            continue
        if not all(c["passed"] is None or c["passed"] != c["expected_to_fail"] for c in data.get("checks", [])):
            continue
        out.setdefault(data["scenario"], {})[data["mode"]] = data["baseline_figures"]
    return out


GATED = (("ttft_s", 50), ("completion_s", 50))  # the figures the regression gate keeps per group


def gated_figures(trace: Trace) -> dict[str, dict[str, float]]:
    """Each group's gated figures in seconds on the trace's own clock."""
    out: dict[str, dict[str, float]] = {}
    for group in dict.fromkeys(s.group for s in trace.streams):
        row = {}
        for metric, p in GATED:
            value = percentile(metric_values(trace.group(group), metric), p)
            if value is not None:
                row[f"{metric}_p{p}"] = round(value, 6)
        if row:
            out[group] = row
    return out


def baseline_figures(trace: Trace, sim: Trace | None = None) -> dict[str, dict[str, float]]:
    """What a baseline keeps of a run, in units any machine can measure again: a simulated run's
    virtual seconds, a live run's figures over its simulation under this machine's profile
    (`<figure>_over_sim`)."""
    out: dict[str, dict[str, float]] = gated_figures(trace) if trace.mode == "sim" else {}
    if trace.mode != "sim" and sim is not None:
        predicted = gated_figures(sim)
        for group, row in gated_figures(trace).items():
            ratios = {f"{k}_over_sim": round(v / predicted[group][k], 4) for k, v in row.items()
                      if predicted.get(group, {}).get(k)}
            if ratios:
                out[group] = ratios
    return out
