"""`streamlab scenario ...`: run one file or the whole suite with a readable report; schema; calibrate.
And `streamlab lab ...`, the chapter's measurements. Both reach the `streamlab` command as entry
points (pyproject's `streamlab.commands`), so the service never imports the harness."""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from harness.format.scenario import SCENARIOS_DIR
from harness.format.load import ScenarioError, json_schema, load
from harness.format.target import TARGETS
from streamlab.defects import DEFECTS

SCHEMA_PATH = SCENARIOS_DIR / "schema.json"
LAB_DEFECTS = ("",) + tuple(DEFECTS)  # --lab-defect's choices ("": none)


def build_parser() -> argparse.ArgumentParser:
    scenario = argparse.ArgumentParser(prog="streamlab scenario",
                                       description="scenario files: run, run the suite, schema, baseline, calibrate")
    scen_sub = scenario.add_subparsers(dest="scenario_command", required=True)
    run = scen_sub.add_parser("run", help="run one scenario file and print a table per group")
    run.add_argument("file", type=Path)
    run.add_argument("--mode", choices=["sim", "live"], default=None,
                     help="default: sim, or live when a --target is given")
    suite = scen_sub.add_parser("suite", help="run every scenario in scenarios/ and print a report")
    suite.add_argument("--mode", choices=["sim", "live", "both"], default="both")
    for p in (run, suite):
        p.add_argument("--target", default=None,
                       help=f"live runs aim here: one of {', '.join(TARGETS)} (streamlab by default), "
                            "or a loopback URL of a running OpenAI-compatible server")
        p.add_argument("--target-api", choices=["streamlab", "openai-completions", "openai-chat"], default=None)
        p.add_argument("--target-model", default=None, help="the model name requests carry (default: the served one)")
        p.add_argument("--target-profile", default=None,
                       help="what can be observed on the target: vllm, tgi, sglang, llamacpp, llamacpp-slots, "
                            "transformers-serve, streamlab, generic (default for a URL)")
    suite.add_argument("-k", dest="pattern", default="", help="only scenarios whose name contains this (or any of "
                                                               "several, comma-separated)")
    for p in (run, suite):
        p.add_argument("--parity-profile", choices=["machine", "committed"], default="machine",
                       help="the cost model live runs are judged against (parity, the live gate): this machine's, "
                            "fitted here and cached in ~/.cache/streamlab/profiles/ (1.5-3 minutes on 2 cores when it is not; a 5-15 s probe when it is; default), or the "
                            "committed scenarios/profiles/<model>.json (another machine's seconds: comparison only)")
        p.add_argument("--refit", action="store_true", help="fit this machine's cost model again, cached or not")
        p.add_argument("--lab-step-slowdown", type=float, default=1.0, metavar="F",
                       help="lab: every scenario's engine steps take F times as long (each step also waits "
                            "(F - 1) x its own time), to show that the timing gates catch a slower engine")
        p.add_argument("--lab-defect", default="", choices=LAB_DEFECTS, metavar="NAME",
                       help="lab: every scenario's server runs this seeded defect (streamlab/defects.py): the "
                            "library's verdicts on it, beside what the swarm finds")
        p.add_argument("--workers", type=int, default=None, metavar="N",
                       help="live: split each run's clients over N Ray workers (a local Ray cluster, or the one "
                            "--ray names); the checks run here on the merged records (docs/SCALE.md)")
        p.add_argument("--ray", default=None, metavar="ADDRESS",
                       help="live: the workers run on this running Ray cluster (host:port), one per node where "
                            "it can; with --workers N (default: 2)")
    suite.add_argument("--update-baseline", action="store_true",
                       help="write each run's latency figures to scenarios/baselines.json (the CI gate)")
    swarm = scen_sub.add_parser("swarm", help="draw scenarios from a seed and run them in simulation until one fails; "
                                              "shrink it and write it as YAML")
    swarm.add_argument("--seed", type=int, default=0)
    swarm.add_argument("--runs", type=int, default=None, help="draw at most this many (default: 200 without --time)")
    swarm.add_argument("--time", type=float, default=None, metavar="SECONDS", help="search for at most this long")
    swarm.add_argument("--out", type=Path, default=None, help="where a shrunk failure is written (default: "
                                                            "scenarios/found/)")
    swarm.add_argument("--no-db", action="store_true", help="without Hypothesis's example database "
                                                            "(.tools/swarm-db: a failure found before is replayed first)")
    swarm.add_argument("--lab-defect", default="", choices=LAB_DEFECTS, metavar="NAME",
                       help="lab: every drawn server runs this seeded defect (streamlab/defects.py), to show the "
                            "swarm finds it")
    swarm.add_argument("--target", default=None, help="run drawn scenarios live against this target (a name or a "
                                                      "loopback URL), judged by what its profile can observe")
    scen_sub.add_parser("schema", help=f"write the JSON Schema of the format to {SCHEMA_PATH}")
    scen_sub.add_parser("targets-report", help="run the peer scenarios against every target that runs here "
                                               "and write docs/TARGETS.md")
    scen_sub.add_parser("baseline", help="refresh scenarios/baselines.json from the passing runs in results/scenarios")
    cal = scen_sub.add_parser("calibrate", help="measure the cost model the simulation uses: the engine in-process, "
                                                "then serving costs from live runs")
    cal.add_argument("--model", default="tiny")
    cal.add_argument("--engine-only", action="store_true", help="refit the engine terms only; keep the serving terms")
    cal.add_argument("--pairs-only", action="store_true",
                     help="re-read only the drift check's base (the engine's decode bursts over the yardstick's, "
                          "reference_s.pairs); keep every term")
    return scenario


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    console = Console(width=None if sys.stdout.isatty() else 160)
    if args.scenario_command == "schema":
        from harness.scenario_docs import write_readme
        SCHEMA_PATH.write_text(json.dumps(json_schema(), indent=2) + "\n")
        console.print(f"wrote {SCHEMA_PATH} and the generated sections of {write_readme()}")
        return 0
    if args.scenario_command == "baseline":
        from harness.judge.baselines import BASELINES, figures_from_results, load_baselines, save_baselines
        from harness.run.runner import RESULTS
        data = load_baselines()
        fresh = figures_from_results(RESULTS)
        for name, modes in fresh.items():
            data.setdefault(name, {}).update(modes)
        save_baselines(data)
        console.print(f"wrote {BASELINES}: {sum(len(m) for m in fresh.values())} scenario runs from {RESULTS}")
        return 0
    if args.scenario_command == "swarm":
        from harness.swarm.report import run_swarm
        return run_swarm(console, args)
    if args.scenario_command == "targets-report":
        from harness.targets_report import write_page
        console.print(f"wrote {write_page(lambda line: console.print(line, highlight=False))}")
        return 0
    if args.scenario_command == "calibrate":
        from harness.fit.calibrate import calibrate
        if args.pairs_only:
            from harness.machine.cost_model import engine_pairs, load_profile
            old = load_profile(args.model)
            profile = dataclasses.replace(old, reference_s={**old.reference_s, "pairs": engine_pairs(args.model)})
            console.print(f"engine over yardstick, per batch: {profile.reference_s['pairs']}")
            console.print(f"wrote {profile.save()}")
            return 0
        profile = calibrate(args.model, engine_only=args.engine_only, say=console.print)
        console.print(profile)
        console.print(f"wrote {profile.save()}")
        return 0
    from harness.run.runner import RunContext
    from harness.format.target import resolve_target
    try:
        target = None if args.target is None else resolve_target(args.target, args.target_api, args.target_model,
                                                                 args.target_profile)
    except ValueError as exc:
        console.print(f"[red]--target: {exc}[/]")
        return 2
    sharding = None
    if args.workers is not None or args.ray is not None:
        from harness.live.shards import Sharding, sharding_unavailable

        if sharding_unavailable():
            console.print(f"[red]--workers/--ray: {sharding_unavailable()}[/]")
            return 2
        if args.workers is not None and args.workers < 1:
            console.print(f"[red]--workers: must be 1 or more, got {args.workers}[/]")
            return 2
        sharding = Sharding(args.workers or 2, args.ray)
    ctx = RunContext(target=target, lab_step_slowdown=args.lab_step_slowdown, lab_defect=args.lab_defect,
                     sharding=sharding)
    try:
        return _run_or_suite(console, args, ctx, target)
    finally:
        ctx.close()  # a command target's server, kept across the session's runs


def _run_or_suite(console: Console, args, ctx, target) -> int:
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
    return _suite(console, ctx, args.mode, args.pattern, args.update_baseline, args.parity_profile, args.refit)


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
           parity_profile: str = "machine", refit: bool = False) -> int:
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
    files = sorted(p for p in SCENARIOS_DIR.glob("*.yaml") if any(k in p.stem for k in pattern.split(",")))
    if parity_profile == "machine" and mode in ("both", "live"):
        _fit_machine_profile(console, ctx, files, refit)
    table = Table(title=f"streamlab scenario suite: {len(files)} scenarios, modes {', '.join(modes)}")
    for col in ("scenario", "mode", "result", "checks", "wall s", "what failed"):
        table.add_column(col, justify="right" if col == "wall s" else "left", no_wrap=col == "scenario")
    failed = passed = skipped = 0
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
    console.print(f"{passed} passed, {failed} failed, {skipped} skipped in {time.perf_counter() - t0:.0f}s; "
                  f"results and timelines in results/scenarios/", highlight=False)
    return 1 if failed else 0


def lab_parser() -> argparse.ArgumentParser:
    from streamlab.presets import PRESETS

    lab = argparse.ArgumentParser(prog="streamlab lab", description="the chapter's measurements against a real server process")
    lab_sub = lab.add_subparsers(dest="lab", required=True)
    model_help = f"preset ({', '.join(PRESETS)}), a local GPT-2 folder, or a GPT-2 name already in the HF cache"
    for name, text in (("buffers", "bytes a non-reading client absorbs before the server's write blocks"),
                       ("bytes", "bytes per token event"),
                       ("disconnect", "release delay after FIN/RST; waste of abandoned streams by response class")):
        cmd = lab_sub.add_parser(name, help=text)
        cmd.add_argument("--model", default="tiny", help=model_help)
        cmd.add_argument("--json", type=Path, default=Path(f"results/lab_{name}.json"))
        if name == "disconnect":
            cmd.add_argument("--repetitions", type=int, default=6)
    return lab


def lab_main(argv: list[str] | None = None) -> int:
    """`streamlab lab buffers|bytes|disconnect` (registered as a streamlab command in pyproject)."""
    import asyncio

    from harness.live import lab
    from streamlab.report_tables import disconnect_table

    args = lab_parser().parse_args(argv)
    console = Console()
    if args.lab == "bytes":
        result = asyncio.run(lab.measure_bytes(args.model))
        console.print(result)
    elif args.lab == "buffers":
        from harness.fit.calibrate import buffer_terms
        from harness.machine.cost_model import load_profile
        result = asyncio.run(lab.measure_buffers(args.model))
        console.print(result["by_event_bytes"])
        terms = buffer_terms(result)
        if terms:  # the simulation's transport: where writes block, and what one read takes
            profile = dataclasses.replace(load_profile(args.model), **terms)
            console.print(f"simulation buffer model: {profile.send_buffer_bytes} bytes to a default client, "
                          f"{profile.server_side_buffer_bytes} on the server's side, one read of a full "
                          f"receive buffer {profile.read_window_bytes} -> {profile.save()}")
    else:
        result = asyncio.run(lab.measure_disconnect(args.model, args.repetitions))
        console.print(disconnect_table(result))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2) + "\n")
    console.print(f"wrote {args.json}")
    return 0
