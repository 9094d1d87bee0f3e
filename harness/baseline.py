"""Regression gates: each group's latency against a committed baseline, with a tolerance
wide enough for a noisy 2-core machine. Leaks, double releases and identity have no tolerance:
those checks are absolute. `streamlab scenario suite --update-baseline` refreshes the file.
"""

from __future__ import annotations

import json
from pathlib import Path

from harness.checks import CheckResult
from harness.report import Trace, metric_values, percentile

BASELINES = Path(__file__).resolve().parent.parent / "scenarios" / "baselines.json"
# (ratio, seconds): a figure may be up to ratio x its baseline plus seconds.
TOLERANCE = {
    # Live: the machine is shared and noisy; a fresh server's first tokens vary by 250 ms (41 vs 230 ms seen).
    "live": (3.0, 0.25),
    # Simulation: deterministic for a given profile, so 10% is room for a deliberate small change
    # and still catches a first token two steps late. A new profile means new baselines.
    "sim": (1.10, 0.0005),
}
GATED = (("ttft_s", 50), ("completion_s", 50))


def figures(trace: Trace) -> dict[str, dict[str, float]]:
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


def load_baselines(path: Path = BASELINES) -> dict:
    return json.loads(path.read_text()) if path.exists() else {}


def save_baselines(data: dict, path: Path = BASELINES) -> None:
    path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")


def regression(trace: Trace, baselines: dict, again: Trace | None = None) -> CheckResult | None:
    """The gate against the committed figures. `again`: a second live run of the same scenario;
    each figure is then the better of the two, so one run slowed by the shared machine (a
    0.5 s stall once in a few full runs) does not fail it, and a real regression, slow in
    both, still does."""
    base = baselines.get(trace.scenario, {}).get(trace.mode)
    if not base:
        return None
    now = figures(trace)
    if again is not None:
        second = figures(again)
        now = {g: {k: min(v, second.get(g, {}).get(k, v)) for k, v in row.items()} for g, row in now.items()}
    ratio, slack = TOLERANCE[trace.mode]
    problems, shown = [], []
    for group, row in base.items():
        for key, old in row.items():
            new = now.get(group, {}).get(key)
            if new is None:
                continue
            limit = ratio * old + slack
            shown.append(f"{group} {key} {new * 1e3:.0f}ms (baseline {old * 1e3:.0f}ms)")
            if new > limit:
                problems.append(f"{group} {key} = {new * 1e3:.1f}ms > {limit * 1e3:.1f}ms")
    runs = " (better of 2 runs)" if again is not None else ""
    return CheckResult("regression", not problems,
                       "; ".join(shown[:6]) + ("; ..." if len(shown) > 6 else "") + runs,
                       f"<= {ratio:g} x baseline + {slack * 1e3:g}ms ({trace.mode})", problems)


def figures_from_results(results_dir: Path) -> dict:
    """Baselines from the JSON results of passing runs already on disk (no re-run)."""
    from harness.clients import StreamRecord

    out: dict = {}
    for path in sorted(results_dir.glob("*-*.json")):
        data = json.loads(path.read_text())
        if not all(c["passed"] != c["expected_to_fail"] for c in data.get("checks", [])):
            continue
        streams = [StreamRecord(**s) for s in data["streams"]]
        trace = Trace(data["scenario"], data["mode"], data["seed"], {}, streams, {}, [], [], [])
        out.setdefault(data["scenario"], {})[data["mode"]] = figures(trace)
    return out
