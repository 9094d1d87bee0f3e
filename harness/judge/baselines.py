"""scenarios/baselines.json: the committed figures the regression gate (harness.judge.timing.regression)
compares with, read and written here. What a baseline keeps of a run, and in which units, is
harness.judge.timing.baseline_figures. `streamlab scenario suite --update-baseline` refreshes the file.
"""

from __future__ import annotations

import json
from pathlib import Path

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
