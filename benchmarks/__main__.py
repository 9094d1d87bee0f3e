"""`python -m benchmarks` (or `scripts/dev bench`): every measurement, its JSON, its plots and
docs/RESULTS.md. 16.5 minutes on 2 CPU cores here (under 20 is the budget).

  --only overlap,peer   run some sections; the page is rebuilt from every JSON present, or, where
                        some section's JSON is missing here, only harness and capacity are
                        written into the page as it is (benchmarks/page.splice_page)
  --reps N              repetitions where the chapter used three (default 3)
  --page-only           rebuild plots and docs/RESULTS.md from results/benchmarks/*.json
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

from rich.console import Console

from benchmarks.common import machine, read_json, write_json

SECTIONS = ("step", "bound", "overlap", "peer", "prefill", "joiners", "slow_readers", "disconnect", "proxy",
            "overload", "precision", "soak", "harness", "capacity")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default=",".join(SECTIONS), help=f"comma-separated, from {', '.join(SECTIONS)}")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--page-only", action="store_true")
    args = parser.parse_args(argv)
    only = [s for s in args.only.split(",") if s]
    unknown = set(only) - set(SECTIONS)
    if unknown:
        parser.error(f"unknown sections {sorted(unknown)}; choose from {', '.join(SECTIONS)}")
    console = Console()
    say = console.log
    log_dir = Path(tempfile.mkdtemp(prefix="streamlab-bench-"))
    from benchmarks.page import ALONE, splice_page, write_page

    missing = [s for s in SECTIONS if (args.page_only or s not in only) and not read_json(s)]
    if missing and not (set(only) <= set(ALONE) and not set(only) & set(missing)):
        parser.error(f"no results here for {', '.join(missing)}: run every section (scripts/dev bench), or only "
                     f"{' and '.join(ALONE)}, which are written into the page as it is")
    timings = read_json("timings") or {}
    if not args.page_only:
        for section in (s for s in SECTIONS if s in only):
            t0 = time.perf_counter()
            say(f"[bold]{section}[/bold]")
            write_json(section, {**run_section(section, args.reps, log_dir, say), "machine": machine()})
            timings[section] = time.perf_counter() - t0
            write_json("timings", timings)
            say(f"{section}: {timings[section]:.0f} s")
    path = splice_page(only) if missing else write_page()
    console.print(f"wrote {path} (sections took {sum(timings.values()) / 60:.1f} min in all; server logs in {log_dir})")
    return 0


def run_section(section: str, reps: int, log_dir: Path, say) -> dict:
    if section == "step":
        from streamlab.bench_step import run_step_bench
        from streamlab.models import load_model

        return run_step_bench(load_model("gpt2-small-random"), [1, 2, 4, 8, 16, 32], 48, steps=6, repeats=reps)
    if section == "bound":
        from benchmarks.overlap import in_process_bound, workload

        return in_process_bound(workload(), reps)
    if section == "overlap":
        from benchmarks.overlap import run_ours, workload

        return asyncio.run(run_ours(workload(), reps, log_dir, say))
    if section == "peer":
        from benchmarks import peer

        return asyncio.run(peer.run(reps, log_dir, say))
    if section == "prefill":
        from benchmarks import prefill

        return prefill.run(reps, log_dir, say)
    if section == "overload":
        from benchmarks import overload

        return overload.run(say)
    if section == "soak":
        from benchmarks import soak

        return soak.run(say)
    if section == "precision":
        from benchmarks import precision

        return precision.run(say)
    if section == "joiners":
        from benchmarks import joiners

        return asyncio.run(joiners.run(log_dir, say))
    if section == "slow_readers":
        from benchmarks import slow_readers

        return slow_readers.run(say)
    if section == "disconnect":
        from harness.live.lab import measure_disconnect

        return asyncio.run(measure_disconnect("tiny", repetitions=6))
    if section == "proxy":
        from benchmarks import proxy

        return proxy.run(reps, say)
    if section == "harness":
        from benchmarks import harness_speed

        return {"leak_300": harness_speed.leak_300(say),
                "clients": asyncio.run(harness_speed.sustained_clients(log_dir, say))}
    if section == "capacity":
        from benchmarks import harness_capacity

        return {**harness_capacity.run(log_dir, say), "before": harness_capacity.before()}
    raise ValueError(section)


if __name__ == "__main__":
    raise SystemExit(main())
