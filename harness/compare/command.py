"""`streamlab scenario compare FILE... --baseline SIDE --candidate SIDE`: parse, run, report, exit
0 (pass), 1 (a regression, or a run that broke a non-timing check) or 2 (could not run)."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console

from harness.compare.sides import Side, SideError, parse_side
from harness.run.runner import lab_options

OUT = Path("results") / "compare"


def add_parser(sub) -> None:
    p = sub.add_parser("compare", help="a latency regression gate: scenarios live on two servers in interleaved "
                                       "rounds, outcomes checked first, figures by a paired test (docs/COMPARE.md)")
    p.add_argument("files", type=Path, nargs="+", metavar="FILE")
    p.add_argument("--baseline", default="here", metavar="SIDE",
                   help="here[:KEY=VALUE,...], ref:REV[:KEY=VALUE,...], a target name with its extra arguments "
                        "(\"llamacpp -t 1\"), cmd:COMMAND with {port}, or a loopback URL (default: here)")
    p.add_argument("--candidate", default="here", metavar="SIDE", help="the same forms (default: here)")
    p.add_argument("--lab-step-slowdown", type=float, default=1.0, metavar="F",
                   help="lab: the candidate's engine steps take F x as long (our own server only)")
    # 16, not 10: at alpha 0.01 one round reversed by a machine hiccup (a baseline run at 222 ms
    # among 161-175) hid a 1.25x slowdown at 10 rounds (p 0.049); at 16 one such round leaves p 0.005.
    p.add_argument("--rounds", type=int, default=16, help="rounds per scenario; each runs both sides (default 16)")
    p.add_argument("--alpha", type=float, default=0.01, help="significance of the signed-rank test (default 0.01)")
    p.add_argument("--threshold", type=float, default=0.10,
                   help="a significant figure is a regression only when this much worse (default 0.10: 10%%)")
    p.add_argument("--order", choices=["abba", "shuffle"], default="abba", help="round order (default abba)")
    p.add_argument("--seed", type=int, default=0, help="--order shuffle's seed, and the bootstrap's")
    p.add_argument("--out", type=Path, default=OUT, help=f"compare.json, compare.md, compare.png here (default {OUT})")


def sides_of(args: argparse.Namespace) -> dict[str, Side]:
    sides = {"baseline": parse_side(args.baseline), "candidate": parse_side(args.candidate)}
    if args.lab_step_slowdown != 1:
        c = sides["candidate"]
        if not c.ours:
            raise SideError(f"--lab-step-slowdown: the candidate {c.label!r} is not our own server")
        c.server = {**c.server, **lab_options(args.lab_step_slowdown)}
        c.label += f" --lab-step-slowdown {args.lab_step_slowdown:g}"
    return sides


def run(console: Console, args: argparse.Namespace) -> int:
    # The runs and the statistics (torch, scipy) load only for this command, not for every parse.
    from harness.compare import report
    from harness.compare.gate import ScenarioGate, Settings, SideRuns, finish, gate_scenario
    from harness.format.load import load
    from harness.run.references import References

    settings = Settings(args.rounds, args.alpha, args.threshold, args.order, args.seed)
    try:
        settings.check()
        sides = sides_of(args)
        scenarios = [load(f) for f in args.files]
        for s in scenarios:
            for side in sides.values():
                side.scenario_for(s)  # a server option this scenario's server refuses: before any run
    except (SideError, ValueError) as exc:
        console.print(f"[red]compare: {exc}[/]")
        for stale in ("compare.json", "compare.md", "compare.png"):  # no earlier gate's result read as this one's
            (args.out / stale).unlink(missing_ok=True)
        return report.COULD_NOT_RUN
    labels = (sides["baseline"].label, sides["candidate"].label)
    references = References()
    gates = []
    for scenario in scenarios:
        try:
            gates.append(gate_scenario(scenario, sides, settings, references,
                                       lambda line: console.print(line, highlight=False)))
        except (RuntimeError, OSError) as exc:  # a side's server that would not start, a lost socket
            console.print(f"[red]compare {scenario.name}: {exc}[/]")
            gates.append(ScenarioGate(scenario.name, SideRuns(), SideRuns(), refused=f"could not run: {exc}"))
    finish(gates, settings)
    console.print(report.table(gates, labels))
    for path in report.write(gates, labels, settings, args.out):
        console.print(f"wrote {path}")
    console.print(report.headline(gates, labels), highlight=False)
    return report.exit_code(gates)
