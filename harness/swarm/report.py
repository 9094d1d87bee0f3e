"""`streamlab scenario swarm`: run the swarm (harness/swarm/search.py) and say what it found."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape

from harness.record.trace import states_line
from harness.swarm.search import DATABASE_DIR, FOUND_DIR, search, size, write_found
from harness.swarm.target import TargetJudge


def run_swarm(console: Console, args) -> int:
    runs = args.runs if args.runs is not None or args.time is not None else 200
    say = lambda line: console.print(escape(line), highlight=False)  # noqa: E731
    judge = None
    if args.target is not None:
        try:
            judge = TargetJudge(args.target)
        except ValueError as exc:
            console.print(f"[red]--target: {escape(str(exc))}[/]")
            return 2
    try:
        result = search(args.seed, runs, args.time, args.lab_defect, None if args.no_db else DATABASE_DIR,
                        judge=judge, say=say)
    finally:
        if judge is not None and hasattr(judge, "close"):
            judge.close()
    console.print(f"swarm seed {args.seed}: {result.runs} scenarios in {result.seconds:.0f} s "
                  f"({result.per_minute:.0f} a minute), {result.passed} passed", highlight=False)
    reached = result.states_reached
    if reached:  # a state no run reached is one whose bugs this search could not find
        console.print(states_line(reached), highlight=False)
    found = result.found
    if found is None:
        console.print("no failure found")
        return 0
    path = write_found(found, args.seed, args.lab_defect, args.out or FOUND_DIR)
    before, after = size(found.first), size(found.scenario)
    console.print(f"[red]FAILED[/] after {found.runs_to_find} runs ({found.seconds_to_find:.0f} s): "
                  f"{escape(', '.join(r.name for r in found.failed))}", highlight=False)
    for r in found.failed:
        console.print(f"  {escape(r.line())}", highlight=False)
    console.print(f"shrunk in {found.shrink_runs} runs ({found.shrink_s:.0f} s) from {before[0]} groups, "
                  f"{before[1]} clients, {before[2]} tokens to {after[0]}, {after[1]}, {after[2]}: {path}",
                  highlight=False)
    console.print(f"replay: streamlab scenario run {path} [--mode live]", highlight=False)
    return 1
