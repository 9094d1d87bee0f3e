"""`python -m harness.times FILE`: where the time of `scripts/dev test` went, printed at its end.

The set-up phases (FILE: what scripts/dev timed, a phase and its seconds a line) and pytest's
items summed by module (harness.progress keeps each item's duration in pytest's cache), the
slowest modules first: the view docs/CI.md's table is made from.
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

DURATIONS = Path(".pytest_cache") / "v" / "streamlab" / "durations"


def module_of(nodeid: str) -> str:
    """tests/test_x.py for a test; scenario items by mode (scenarios/ sim, scenarios/ live)."""
    path = nodeid.split("::")[0]
    if path.startswith("scenarios/") and "::" in nodeid:
        return f"scenarios/*.yaml [{'live' if nodeid.endswith('-live]') else 'sim'}]"
    return path


def by_module(durations: dict[str, float]) -> list[tuple[str, int, float]]:
    groups: dict[str, list[float]] = defaultdict(list)
    for nodeid, seconds in durations.items():
        groups[module_of(nodeid)].append(seconds)
    return sorted(((m, len(v), sum(v)) for m, v in groups.items()), key=lambda row: -row[2])


def main(argv: list[str]) -> int:
    phases = []
    if argv and Path(argv[0]).exists():
        for line in Path(argv[0]).read_text().splitlines():
            name, _, seconds = line.rpartition("\t")
            if name:
                phases.append((name, float(seconds)))
    total = sum(s for _, s in phases)
    print("\nscripts/dev test: where the time went")
    for name, seconds in phases:
        print(f"  {name:<40} {seconds / 60:6.1f} min")
    print(f"  {'total':<40} {total / 60:6.1f} min")
    if DURATIONS.exists():
        durations = json.loads(DURATIONS.read_text())
        print("pytest by module (this and earlier runs' last durations), the slowest 15:")
        for module, count, seconds in by_module(durations)[:15]:
            print(f"  {module:<60} {count:4d} items {seconds / 60:6.1f} min")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
