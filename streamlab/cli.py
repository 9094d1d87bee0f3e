"""The `streamlab` command: argparse -> config -> the module that does the work. No logic here."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from streamlab.errors import ModelLoadError
from streamlab.models import PRESETS


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
    demo.add_argument("--model", default="tiny", help=model_help)
    demo.add_argument("--streams", type=int, default=8)
    demo.add_argument("--max-new-tokens", type=int, default=64)

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


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
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
