"""The compare gate's own power and false alarms, measured: `python -m benchmarks.compare_gate`.

Runs `streamlab scenario compare` back to back, GATES times per case, on the same scenarios:
our server against itself (A/A: every regression reported is a false alarm), and against a lab
slowdown of itself at each factor given (every gate that does not report a regression is a
miss). Prints and writes (results/benchmarks/compare_gate.json) the counts, the figures flagged,
each gate's time and, from the A/A gates, the smallest slowdown each figure would have caught.

    scripts/dev bench compare_gate --gates 10 --slowdowns 1.25,1.10
    scripts/dev bench compare_gate --gates 10 --slowdowns 1.25 --ref-slowdowns 1.25   (also written at a revision)
    scripts/dev slow 0.5 bench compare_gate --gates 2       (a machine half as fast)
    scripts/dev bench compare_gate --gates 8 --no-aa --slowdowns "" --ref-slowdowns 1.25   (detection only)
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from argparse import Namespace
from pathlib import Path

from rich.console import Console

from harness.compare.command import OUT, run as compare
from harness.compare.lab_revision import commit_with, computing_step, remove_worktrees
from harness.compare.report import REGRESSION
from harness.format.scenario import SCENARIOS_DIR

DEFAULT = ("overlap_8", "late_joiners_8", "disconnect_fin_mid")


def one_gate(console: Console, files: list[Path], slowdown: float, rounds: int, out: Path,
             baseline: str = "here", candidate: str = "here") -> dict:
    args = Namespace(files=files, baseline=baseline, candidate=candidate, lab_step_slowdown=slowdown, rounds=rounds,
                     alpha=0.01, threshold=0.10, order="abba", seed=0, out=out)
    t0 = time.monotonic()
    code = compare(console, args)
    result = json.loads((out / "compare.json").read_text())
    flagged = [f"{s['scenario']} {f['figure']} {f['effect']:.2f}x" for s in result["scenarios"]
               for f in s["figures"] if f["verdict"] == "regression"]
    return {"exit_code": code, "regressions": flagged, "minutes": round((time.monotonic() - t0) / 60, 2),
            "figures": sum(len(s["figures"]) for s in result["scenarios"]),
            "smallest_detectable": {f"{s['scenario']} {k}": v for s in result["scenarios"]
                                    for k, v in s["smallest_detectable"].items()}}


def case_summary(gates: list[dict], baseline: str, candidate: str) -> dict:
    return {"baseline": baseline, "candidate": candidate,
            "regression_reported": sum(g["exit_code"] == REGRESSION for g in gates), "of": len(gates),
            "figures_flagged": sum(len(g["regressions"]) for g in gates),
            "figures_compared": sum(g["figures"] for g in gates),
            "median_minutes": statistics.median(g["minutes"] for g in gates), "gates": gates}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.compare_gate", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--gates", type=int, default=10, help="gates per case, back to back (default 10)")
    p.add_argument("--slowdowns", default="1.25,1.10", help="lab step slowdowns to detect (default 1.25,1.10)")
    p.add_argument("--ref-slowdowns", default="",
                   help="also: slowdowns written into the engine's step by computing at a git revision of their "
                        "own, gated ref:HEAD against it (for example 1.25)")
    p.add_argument("--no-aa", action="store_true",
                   help="skip the A/A case (when only the slowdowns' detection is being counted)")
    p.add_argument("--rounds", type=int, default=16)
    p.add_argument("--scenarios", default=",".join(DEFAULT))
    p.add_argument("--json", type=Path, default=Path("results/benchmarks/compare_gate.json"))
    args = p.parse_args(argv)
    console = Console(width=160)
    files = [SCENARIOS_DIR / f"{name}.yaml" for name in args.scenarios.split(",")]
    factors = ([] if args.no_aa else [1.0]) + [float(s) for s in args.slowdowns.split(",") if s]
    cases = [(f"{s:g}", s, "here", "here") for s in factors]
    revisions = {float(s): commit_with(computing_step(float(s)), message=f"lab: a step {s}x slower by computing")
                 for s in args.ref_slowdowns.split(",") if s}
    cases += [(f"ref {s:g}", 1.0, "ref:HEAD", f"ref:{sha}") for s, sha in revisions.items()]
    summary = {"scenarios": args.scenarios, "rounds": args.rounds, "gates": args.gates, "cases": {}}
    try:
        for name, slowdown, baseline, candidate in cases:
            gates = [one_gate(console, files, slowdown, args.rounds, OUT / f"gate-{name.replace(' ', '-')}-{i}",
                              baseline, candidate) for i in range(args.gates)]
            summary["cases"][name] = case_summary(gates, baseline, candidate)
    finally:
        remove_worktrees("HEAD", *revisions.values())
    for name, case in summary["cases"].items():
        what = ("A/A (false alarms)" if name == "1" else
                f"candidate {name.split()[-1]}x slower" + (" at a git revision" if name.startswith("ref") else ""))
        console.print(f"{what}: a regression reported in {case['regression_reported']} of {case['of']} gates; "
                      f"{case['figures_flagged']} of {case['figures_compared']} figures flagged; "
                      f"a gate took {case['median_minutes']:.1f} min (median)")
    aa = summary["cases"]["1"]["gates"] if "1" in summary["cases"] else []
    detectable = {k: [g["smallest_detectable"].get(k) for g in aa] for k in (aa[0]["smallest_detectable"] if aa else {})}
    for figure, values in detectable.items():
        known = [v for v in values if v]
        console.print(f"  smallest slowdown caught, {figure}: median {statistics.median(known):.2f}x "
                      f"over {len(known)} A/A gates" if known else f"  {figure}: not within 3x")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(summary, indent=1) + "\n")
    console.print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
