"""Write every library scenario's simulated trace (Trace.to_json: a function of the scenario and its
seed alone) to a folder, one file per scenario, so that two trees can be compared byte for byte:

    .venv/bin/python scripts/sim_traces.py /tmp/after
    git worktree add /tmp/before <commit> && ln -s "$PWD/.tools" /tmp/before/.tools
    (cd /tmp/before && PYTHONPATH=$PWD "$OLDPWD/.venv/bin/python" "$OLDPWD/scripts/sim_traces.py" /tmp/before-traces)
    diff -r /tmp/before-traces /tmp/after && echo identical

A refactoring that says "no behaviour changes" shows it this way.
"""

from __future__ import annotations

import sys
from pathlib import Path


def main(out: Path) -> int:
    import harness
    from harness.run.once import simulate
    from harness.format.scenario import SCENARIOS_DIR
    from harness.format.load import load

    out.mkdir(parents=True, exist_ok=True)
    files = sorted(SCENARIOS_DIR.glob("*.yaml"))
    written = 0
    for path in files:
        scenario = load(path)
        if "sim" not in scenario.modes:
            continue
        (out / f"{scenario.name}.json").write_text(simulate(scenario)[0].to_json() + "\n")
        written += 1
    print(f"{written} simulated traces from {Path(harness.__file__).parent.parent} written to {out}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: scripts/sim_traces.py OUT_DIR")
    raise SystemExit(main(Path(sys.argv[1])))
