"""The `streamlab` command: argparse -> config -> the module that does the work. No logic here."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from streamlab import options
from streamlab.config import ServiceConfig
from streamlab.errors import ModelLoadError
from streamlab.export import FORMATS
from streamlab.presets import PRESETS
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
    serve.add_argument("--ssl-certfile", default=None, help="serve https with this certificate (PEM; its key below)")
    serve.add_argument("--ssl-keyfile", default=None, help="the certificate's private key (PEM)")
    serve.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])

    # Commands other packages register (the harness: `scenario` and `lab`) keep their own
    # parsers; the service never imports them (nor pytest).
    for name, entry in registered_commands().items():
        sub.add_parser(name, help=f"registered by {entry.module} (`streamlab {name} --help`)", add_help=False)

    export = sub.add_parser("export", help="write a model for another stack: a transformers folder (weights, config, "
                                           "tokenizer) or a GGUF file for llama.cpp")
    export.add_argument("model", help=model_help)
    export.add_argument("folder", type=Path, help="folder to write (created if missing)")
    export.add_argument("--format", dest="export_format", choices=FORMATS, default="transformers",
                        help="transformers: a model folder (transformers serve, vLLM); gguf: FOLDER/MODEL.f32.gguf "
                             "(llama.cpp's llama-server)")

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


COMMANDS_GROUP = "streamlab.commands"  # entry points: a name -> main(argv) -> exit code


def registered_commands() -> dict:
    """The subcommands other installed packages register in pyproject's entry points (the
    harness registers `scenario` and `lab`), by name; each is loaded only when it is run."""
    from importlib.metadata import entry_points

    return {entry.name: entry for entry in entry_points(group=COMMANDS_GROUP)}


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
    registered = registered_commands()
    if argv[:1] and argv[0] in registered:
        return registered[argv[0]].load()(argv[1:])
    args = build_parser().parse_args(argv)
    try:
        import torch  # noqa: F401  (every command below runs our engine)
    except ImportError as exc:
        print(f"streamlab {args.command}: our engine is not installed ({exc}): pip install 'streamlab[engine]'",
              file=sys.stderr)
        return 2
    if args.command == "serve":
        from streamlab.models import load_model
        from streamlab.server import serve

        config = service_config(args)
        try:
            load_model(config.model)  # fail here, in one line, rather than inside the server's start-up
        except ModelLoadError as exc:
            print(f"streamlab: {exc}", file=sys.stderr)
            return 2
        if bool(args.ssl_certfile) != bool(args.ssl_keyfile):
            print("streamlab: --ssl-certfile and --ssl-keyfile go together", file=sys.stderr)
            return 2
        serve(config, args.host, args.port, args.log_level, args.ssl_certfile, args.ssl_keyfile)
        return 0
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

        console.print(f"wrote {export_model(loaded, args.folder, args.export_format)}")
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


if __name__ == "__main__":
    raise SystemExit(main())
