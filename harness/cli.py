"""`streamlab scenario ...`: run one file or the whole suite with a readable report; schema; calibrate.
And `streamlab lab ...`, the chapter's measurements. Both reach the `streamlab` command as entry
points (pyproject's `streamlab.commands`), so the service never imports the harness."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

from rich.console import Console

from harness.machine import reach
from harness.compare import command as compare_command
from harness.format.scenario import SCENARIOS_DIR
from harness.format.load import json_schema
from harness.format.target import TARGETS
from streamlab.defects import DEFECTS

SCHEMA_PATH = SCENARIOS_DIR / "schema.json"
LAB_DEFECTS = ("",) + tuple(DEFECTS)  # --lab-defect's choices ("": none)


def build_parser() -> argparse.ArgumentParser:
    scenario = argparse.ArgumentParser(prog="streamlab scenario",
                                       description="scenario files: run, run the suite, compare two servers, schema, "
                                                   "baseline, calibrate")
    scen_sub = scenario.add_subparsers(dest="scenario_command", required=True)
    run = scen_sub.add_parser("run", help="run one scenario file and print a table per group")
    run.add_argument("file", type=Path)
    run.add_argument("--mode", choices=["sim", "live"], default=None,
                     help="default: sim, or live when a --target is given")
    suite = scen_sub.add_parser("suite", help="run every scenario in a folder (default: the library, scenarios/) "
                                              "and print a report")
    suite.add_argument("folder", type=Path, nargs="?", default=None,
                       help="a folder of scenario files, yours (default: the library)")
    suite.add_argument("--mode", choices=["sim", "live", "both"], default="both")
    for p in (run, suite):
        p.add_argument("--target", default=None,
                       help=f"live runs aim here: one of {', '.join(TARGETS)} (streamlab by default), "
                            "or the URL of a running OpenAI-compatible server (http or https; another host than "
                            "this machine's loopback with --allow-remote)")
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
    compare_command.add_parser(scen_sub)
    for p in (run, suite, swarm, scen_sub.choices["compare"]):
        p.add_argument("--allow-remote", action="append", default=[], metavar="HOST",
                       help="consent: live runs may aim at HOST, a server you run that is not this machine's loopback "
                            "(repeat for more; or STREAMLAB_ALLOW_REMOTE=HOST,...)")
    for p in (run, suite):
        p.add_argument("--ca-file", default=None, help="an https target's certificate is verified against these CAs "
                                                       "(default: the system's; or STREAMLAB_TARGET_CA_FILE)")
        p.add_argument("--insecure", action="store_true",
                       help="an https target's certificate is not verified (a self-signed staging server)")
    schema = scen_sub.add_parser("schema", help="print the JSON Schema of the format (for an editor), or write it")
    schema.add_argument("--write", type=Path, nargs="?", const=SCHEMA_PATH, default=None, metavar="PATH",
                        help=f"write it to PATH instead; with no PATH to {SCHEMA_PATH} and the generated sections "
                             "of scenarios/README.md (this repository's own, kept current by a test)")
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
    reach.consent(getattr(args, "allow_remote", None) or [])
    if args.scenario_command == "schema":
        text = json.dumps(json_schema(), indent=2) + "\n"
        if args.write is None:
            sys.stdout.write(text)
            return 0
        args.write.write_text(text)
        if args.write == SCHEMA_PATH:
            from harness.scenario_docs import write_readme
            console.print(f"wrote {SCHEMA_PATH} and the generated sections of {write_readme()}")
        else:
            console.print(f"wrote {args.write}")
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
    if args.scenario_command == "compare":
        return compare_command.run(console, args)
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
            from harness.machine.cost_model import load_profile, with_pairs_read_here
            profile = with_pairs_read_here(load_profile(args.model), args.model)
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
                                                                 args.target_profile, args.ca_file, args.insecure)
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
        from harness.suite import run_or_suite

        return run_or_suite(console, args, ctx, target)
    finally:
        ctx.close()  # a command target's server, kept across the session's runs


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


def target_main(argv: list[str] | None = None) -> int:
    """`streamlab target probe URL` (registered as a streamlab command in pyproject)."""
    from harness.format.target import resolve_target
    from harness.judge.registry import CHECKS, unobservable
    from harness.targets.probe import probe, profile_yaml

    parser = argparse.ArgumentParser(prog="streamlab target", description="what a running server lets the checks see")
    sub = parser.add_subparsers(dest="target_command", required=True)
    p = sub.add_parser("probe", help="ask a running server what it shows; print which checks are observable and "
                                     "write a profile to edit and use (--target-profile FILE, or target.profile)")
    p.add_argument("url", help="the server: http(s)://HOST:PORT")
    p.add_argument("--api", choices=["openai-completions", "openai-chat"], default="openai-completions")
    p.add_argument("--model", default=None, help="the model name requests carry (default: /v1/models' first)")
    p.add_argument("--write", type=Path, default=None, metavar="PATH",
                   help="where the profile goes (default: profile-HOST-PORT.yaml here)")
    p.add_argument("--allow-remote", action="append", default=[], metavar="HOST",
                   help="consent: HOST is a server you run that is not this machine's loopback")
    p.add_argument("--ca-file", default=None, help="an https server's certificate is verified against these CAs")
    p.add_argument("--insecure", action="store_true", help="an https server's certificate is not verified")
    args = parser.parse_args(argv)
    console = Console(width=None if sys.stdout.isatty() else 160)
    reach.consent(args.allow_remote)
    try:
        target = resolve_target(args.url, args.api, args.model, "generic", args.ca_file, args.insecure)
    except ValueError as exc:
        console.print(f"[red]{exc}[/]")
        return 2
    report = probe(args.url, args.api, args.model, target.api_key, target.origin)
    console.print(f"[bold]{args.url}[/] (model {report.model})")
    console.print("routes: " + ", ".join(f"{path} {status or 'no answer'}" for path, status in report.routes.items()))
    console.print("series found: " + (", ".join(f"{k} = {v}" for k, v in report.series.items()) or "none of the "
                                      "known servers' (write your own names into the profile's gauges)"))
    s = report.stream
    console.print(f"a stream: status {s.get('status')}, {s.get('tokens', 0)} token events, token ids "
                  f"{'yes' if s.get('token_ids') else 'no'}{' with ' + str(s['extra']) if s.get('extra') else ''}, "
                  f"usage {'yes' if s.get('usage') else 'no'}, finish reason {s.get('finish_reason')}")
    console.print("bad requests: " + ", ".join(f"{k} {st or 'no answer'} {err or ''}".strip()
                                             for k, (st, err) in report.refusals.items()))
    for finding in report.findings:
        console.print(f"[yellow]finding:[/] {finding}")
    hidden = unobservable(report.profile)
    for check in CHECKS:
        console.print(f"  {check.name:<18} {'[green]observable[/]' if check.name not in hidden else hidden[check.name]}")
    origin = target.origin
    out = args.write or Path(f"profile-{origin.host}-{origin.port}.yaml")
    out.write_text(profile_yaml(report.profile))
    console.print(f"wrote {out}: use it with --target-profile {out}, or inline as a scenario's target.profile")
    return 0
