"""`streamlab scenario run` and `streamlab scenario suite`: one scenario, or the library, run and
judged with what a person or a CI log needs to follow it (a bar or a heartbeat, the table,
parity's table and spread). harness/cli.py parses the command line."""

from __future__ import annotations

import json
import statistics
import time

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from harness.format.scenario import SCENARIOS_DIR
from harness.format.load import ScenarioError, load, load_by_name
from harness.record.trace import states_line, states_reached



def run_or_suite(console: Console, args, ctx, target) -> int:
    from harness.run.runner import refused_here

    if args.scenario_command == "run":
        try:
            scenario = load(args.file)
        except ScenarioError as exc:
            console.print(f"[red]{exc}[/]")
            return 2
        mode = args.mode or ("live" if target is not None else "sim")
        refused = refused_here(scenario, mode, ctx)
        if refused:  # before any machine fit it would otherwise wait for
            console.print(f"[red]{escape(f'{args.file}: {refused}')}[/]", markup=True, highlight=False)
            return 2
        if mode == "live" and args.parity_profile == "machine":
            _fit_machine_profile(console, ctx, [args.file], args.refit)
        outcome = _run(console, scenario, mode, ctx)
        _print_outcome(console, outcome)
        return 0 if outcome.ok else 1
    folder = args.folder or SCENARIOS_DIR
    if not folder.is_dir():
        console.print(f"[red]{escape(str(folder))}: not a folder of scenario files[/]", highlight=False)
        return 2
    if folder.resolve() != SCENARIOS_DIR.resolve() and args.update_baseline:
        console.print("[red]--update-baseline writes the library's scenarios/baselines.json: it takes no folder "
                      "(a folder of your own is gated with `streamlab scenario compare`)[/]", highlight=False)
        return 2
    if folder.resolve() != SCENARIOS_DIR.resolve():  # a baseline scenario's name: theirs first, then the library's
        ctx.loader = lambda name: load(folder / f"{name}.yaml") if (folder / f"{name}.yaml").exists() \
            else load_by_name(name)
    return _suite(console, ctx, args.mode, args.pattern, args.update_baseline, args.parity_profile, args.refit,
                  folder)


HEARTBEAT_S = 15.0  # a CI log hears from a run still going this often (and from none quicker)


def _run(console: Console, scenario, mode: str, ctx, place: str = ""):
    """One run, judged. In a terminal a bar counts its clients; in a CI log a line says how far a
    run still going is every HEARTBEAT_S, and one line says how it ended (with `place`: the
    suite's items done, time spent and left)."""
    from harness.run.runner import run_scenario

    if not console.is_terminal:
        began, said = time.monotonic(), [time.monotonic()]

        def heartbeat(done: int, total: int) -> None:
            if time.monotonic() - said[0] >= HEARTBEAT_S:
                said[0] = time.monotonic()
                console.print(f"  {scenario.name} [{mode}]: {done}/{total} clients done, "
                              f"{said[0] - began:.0f}s", markup=False, highlight=False)
        outcome = run_scenario(scenario, mode, ctx, progress=heartbeat)
        console.print(f"{scenario.name} [{mode}]: {'passed' if outcome.ok else 'FAILED'} in "
                      f"{time.monotonic() - began:.1f}s{place}", markup=False, highlight=False)
        return outcome
    with Progress(TextColumn(f"{scenario.name} [{mode}]"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=True) as bar:
        task = bar.add_task("clients", total=sum(g.count for g in scenario.groups))
        return run_scenario(scenario, mode, ctx,
                            progress=lambda done, total: bar.update(task, completed=done, total=total))


def _fit_machine_profile(console: Console, ctx, files, refit: bool = False) -> None:
    """The cost model live runs are judged against (harness.fit.machine.use_machine_profile). A
    target's runs (the session's or a file's own) are not judged against our simulation: nothing
    to fit for them (harness.run.runner.fitted_model)."""
    from harness.run.runner import fitted_model

    models = set()
    for path in files:
        try:
            scenario = load(path)
        except ScenarioError:
            continue  # reported with the run
        if fitted_model(scenario, ctx):
            models.add(fitted_model(scenario, ctx))
    if not models:
        return
    from harness.fit.machine import compared_with_committed, use_machine_profile  # our engine: imported to fit it
    for fresh in use_machine_profile(ctx, sorted(models), say=lambda line: console.print(line, highlight=False),
                                     refit=refit):
        console.print("  " + compared_with_committed(fresh), highlight=False)


def _print_outcome(console: Console, outcome) -> None:
    from harness.judge.report import group_table

    console.print(group_table(outcome.trace))
    for w in outcome.trace.workers:  # a sharded run (harness.live.shards)
        console.print(f"  worker {w['worker']} on node {w['node'][:8]}: {w['clients']} clients, clock offset "
                      f"{w['clock_offset_ms']:+.3f} ms (within {w['clock_offset_bound_ms']:.3f}), loop lag p99 "
                      f"{w['loop_lag_p99_ms']:.1f} ms, ready {w['ready_before_t0_ms']:.0f} ms before T0",
                      highlight=False)
    for line in outcome.left_out:
        console.print(f"  [yellow]{line}[/]", highlight=False)
    for check in outcome.checks:
        colour = "yellow" if not check.observed else "green" if check.ok else "red"
        console.print(f"  [{colour}]{check.verdict}[/] {check.line()}", highlight=False)
    evaluated = [c for c in outcome.checks if c.observed]
    unseen = [c.name for c in outcome.checks if not c.observed]
    target = outcome.trace.target
    console.print(f"{outcome.trace.mode}: {len(evaluated)} checks evaluated, {sum(c.ok for c in evaluated)} held, "
                  f"{sum(not c.ok for c in evaluated)} failed; not observable"
                  f"{' on ' + target['name'] if target else ''}: {', '.join(unseen) or 'none'}", highlight=False)


def _suite(console: Console, ctx, mode: str, pattern: str, update_baseline: bool = False,
           parity_profile: str = "machine", refit: bool = False, folder=SCENARIOS_DIR) -> int:
    from harness.judge.baselines import load_baselines, save_baselines
    from harness.judge.report import parity_summary, parity_table
    from harness.run.runner import refused_here
    from harness.judge.timing import parity_rows
    from harness.judge.baselines import baseline_figures

    baselines = load_baselines()
    if update_baseline:
        ctx.baselines = {}  # the figures being refreshed are not a gate for themselves
    parity_data, committed_data, unpaced_data = [], [], []
    modes = ["sim", "live"] if mode == "both" else [mode]
    files = sorted(p for p in [*folder.glob("*.yaml"), *folder.glob("*.yml")]
                   if any(k in p.stem for k in pattern.split(",")))
    if not files:  # a gate that selected nothing must not read as one that passed
        console.print(f"[red]no scenario in {folder} matches -k {pattern!r}: nothing to run[/]", highlight=False)
        return 2
    if parity_profile == "machine" and mode in ("both", "live"):
        _fit_machine_profile(console, ctx, files, refit)
    table = Table(title=f"streamlab scenario suite: {len(files)} scenarios, modes {', '.join(modes)}")
    for col in ("scenario", "mode", "result", "checks", "wall s", "what failed"):
        table.add_column(col, justify="right" if col == "wall s" else "left", no_wrap=col == "scenario")
    failed = passed = skipped = 0
    reached: dict[str, int] = {}  # server state -> runs that reached it (harness.record.trace.states_reached)
    t0 = time.perf_counter()
    rows: dict[str, list[tuple]] = {p.stem: [] for p in files}  # the table's rows, in name order
    scenarios = []
    for path in files:
        try:
            scenarios.append(load(path))
        except ScenarioError as exc:
            rows[path.stem].append((path.stem, "-", "[red]INVALID[/]", "", "", str(exc)))
            failed += 1
    todo = len(scenarios) * len(modes)
    spent: dict[str, list[float]] = {m: [] for m in modes}  # each mode's items' seconds, for the time left
    for scenario in ctx.run_order(scenarios):
        row = rows[scenario.name].append
        for m in modes:
            todo -= 1
            reason = refused_here(scenario, m, ctx)
            if reason:
                row((scenario.name, m, "[yellow]skipped[/]", "", "", reason))
                skipped += 1
                continue
            began = time.perf_counter()
            left = sum(statistics.fmean(v) * todo / len(modes) for v in spent.values() if v)
            place = (f" [{len(scenarios) * len(modes) - todo}/{len(scenarios) * len(modes)}, "
                     f"{(time.perf_counter() - t0) / 60:.1f} min" + (f", about {left / 60:.0f} min left]" if left else "]"))
            outcome = _run(console, scenario, m, ctx, place)
            spent[m].append(time.perf_counter() - began)
            if outcome.trace.mode == "live" and outcome.sim is not None:
                runs = [r.trace for r in outcome.runs]
                parity_data += parity_rows(scenario, [(r.trace, r.paced or outcome.sim) for r in outcome.runs])
                unpaced_data += parity_rows(scenario, [(t, outcome.sim) for t in runs])
                traces = ctx.references.traces
                if ctx.parity_mode != "sim" and (scenario.name, "sim") in traces:
                    committed_data += parity_rows(scenario, [(t, traces[(scenario.name, "sim")]) for t in runs])
            controls = [c.name for c in outcome.checks if c.expected_to_fail]
            checks = f"{sum(c.ok for c in outcome.checks)}/{len(outcome.checks)}"
            checks += f" (control: {', '.join(controls)} failed as designed)" if controls and outcome.ok else ""
            row((scenario.name, m, "[green]passed[/]" if outcome.ok else "[red]FAILED[/]", checks,
                 f"{outcome.trace.wall_s:.1f}", "\n".join(outcome.failures() + outcome.left_out)))
            failed += not outcome.ok
            passed += outcome.ok
            for state in states_reached(outcome.trace):
                reached[state] = reached.get(state, 0) + 1
            if update_baseline and outcome.ok:
                baselines.setdefault(scenario.name, {})[m] = baseline_figures(outcome.trace, outcome.sim)
    for stem in rows:
        for r in rows[stem]:
            table.add_row(*r)
    from harness.run.runner import RESULTS
    if update_baseline:
        save_baselines(baselines)
        console.print("wrote scenarios/baselines.json")
    console.print(table)
    if parity_data:
        console.print(parity_table(parity_data))
        console.print(parity_summary(parity_data), highlight=False)
        if unpaced_data != parity_data:
            console.print(parity_summary(unpaced_data, "the same live runs against this machine's profile, "
                                                       "not paced (reported, not judged)"), highlight=False)
        if committed_data:
            console.print(parity_summary(committed_data, "the same live runs against the committed profile "
                                                         "(reported, not judged)"), highlight=False)
        (RESULTS / "parity.json").write_text(json.dumps(parity_data, indent=1) + "\n")
    if reached or passed or failed:  # a state no run reached is one whose bugs these runs could not find
        console.print(states_line(reached), highlight=False)
    console.print(f"{passed} passed, {failed} failed, {skipped} skipped in {time.perf_counter() - t0:.0f}s; "
                  f"results and timelines in results/scenarios/", highlight=False)
    if not passed and not failed:
        console.print("[red]every selected item was skipped: nothing ran, so nothing passed[/]", highlight=False)
        return 2
    return 1 if failed else 0
