"""The `streamlab` command: argparse -> config -> the module that does the work. No logic here."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from streamlab import options
from streamlab.config import ServiceConfig
from streamlab.errors import ModelLoadError
from streamlab.models import PRESETS
from streamlab.options import add_serve_options


def _int_list(text: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return values


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="streamlab", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    model_help = f"preset ({', '.join(PRESETS)}), a local GPT-2 folder, or a GPT-2 name already in the HF cache"

    demo = sub.add_parser("demo", help="a few generations alone and together: tokens/s and identity")
    demo.add_argument("--model", default="stdlib-small", help=model_help)
    demo.add_argument("--streams", type=int, default=8)
    demo.add_argument("--max-new-tokens", type=int, default=64)

    serve = sub.add_parser("serve", help="serve the model over HTTP with SSE streaming",
                           formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (loopback by default)")
    serve.add_argument("--port", type=int, default=8000)
    add_serve_options(serve)
    serve.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])

    # The harness owns its own parser; the service never imports it (nor pytest).
    sub.add_parser("scenario", help="scenario files: run, run the suite, schema, baseline, calibrate", add_help=False)

    lab = sub.add_parser("lab", help="the chapter's measurements against a real server process")
    lab_sub = lab.add_subparsers(dest="lab", required=True)
    for name, text in (("buffers", "bytes a non-reading client absorbs before the server's write blocks"),
                       ("bytes", "bytes per token event"),
                       ("disconnect", "release delay after FIN/RST; waste of abandoned streams by response class")):
        cmd = lab_sub.add_parser(name, help=text)
        cmd.add_argument("--model", default="tiny", help=model_help)
        cmd.add_argument("--json", type=Path, default=Path(f"results/lab_{name}.json"))
        if name == "disconnect":
            cmd.add_argument("--repetitions", type=int, default=6)

    export = sub.add_parser("export", help="write a model as a transformers folder (weights, config, tokenizer)")
    export.add_argument("model", help=model_help)
    export.add_argument("folder", type=Path, help="folder to write (created if missing)")

    bench = sub.add_parser("bench", help="benchmarks")
    bench_sub = bench.add_subparsers(dest="bench", required=True)
    step = bench_sub.add_parser("step", help="decode-step time: paged engine vs transformers' contiguous cache")
    step.add_argument("--model", default="gpt2-small-random", help=model_help)
    step.add_argument("--batch-sizes", type=_int_list, default=[1, 2, 4, 8, 16, 32])
    step.add_argument("--prompt-tokens", type=int, default=48)
    step.add_argument("--steps", type=int, default=20, help="timed decode steps per repetition")
    step.add_argument("--repeats", type=int, default=3)
    step.add_argument("--json", type=Path, default=Path("results/bench_step.json"))
    return parser


API_KEY_ENV = "STREAMLAB_API_KEY"


def service_config(args: argparse.Namespace) -> ServiceConfig:
    values = vars(args)
    if not values.get("api_key"):  # the key from the environment keeps it out of `ps` and shell history
        values = {**values, "api_key": os.environ.get(API_KEY_ENV, "")}
    try:
        return options.service_config(values)
    except ValueError as exc:
        raise SystemExit(f"streamlab serve: {exc}") from None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["scenario"]:
        from harness.cli import main as scenario_main
        return scenario_main(argv[1:])
    args = build_parser().parse_args(argv)
    if args.command == "serve":
        from streamlab.models import load_model
        from streamlab.server import serve

        config = service_config(args)
        try:
            load_model(config.model)  # fail here, in one line, rather than inside the server's start-up
        except ModelLoadError as exc:
            print(f"streamlab: {exc}", file=sys.stderr)
            return 2
        serve(config, args.host, args.port, args.log_level)
        return 0
    if args.command == "lab":
        return run_lab(args)
    from rich.console import Console

    from streamlab.models import load_model

    console = Console()
    try:
        loaded = load_model(args.model)
    except ModelLoadError as exc:
        print(f"streamlab: {exc}", file=sys.stderr)
        return 2
    if args.command == "demo":
        from streamlab.demo import run_demo

        return 0 if run_demo(loaded, args.streams, args.max_new_tokens, console) else 1
    if args.command == "export":
        from streamlab.export import export_model

        console.print(f"wrote {export_model(loaded, args.folder)}")
        return 0
    if args.command == "bench" and args.bench == "step":
        from streamlab.bench_step import run_step_bench, write_json
        from streamlab.report_tables import step_table

        result = run_step_bench(loaded, args.batch_sizes, args.prompt_tokens, args.steps, args.repeats)
        write_json(result, args.json)
        console.print(step_table(result))
        console.print(f"wrote {args.json}")
        return 0
    return 2


def run_lab(args: argparse.Namespace) -> int:
    import asyncio
    import dataclasses
    import json

    from rich.console import Console

    from harness import lab
    from streamlab.report_tables import disconnect_table

    console = Console()
    if args.lab == "bytes":
        result = asyncio.run(lab.measure_bytes(args.model))
        console.print(result)
    elif args.lab == "buffers":
        from harness.calibrate import buffer_terms
        from harness.profile import load_profile
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


if __name__ == "__main__":
    raise SystemExit(main())
