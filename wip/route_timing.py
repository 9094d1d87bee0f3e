import re, subprocess
from pathlib import Path
ROUTE = {}
for mod, names in {
    "harness.judge.bounds": "Allowance SIM_GATE LIVE_GATE CAPACITY PARITY_COMPLETION PARITY_TTFT FIGURE DRIFT RUNS",
    "harness.judge.baselines": "GATED gated_figures baseline_figures",
    "harness.machine.pace": "MOVED BUSY_GAP_S PACE_MIN_STEPS PACE_OUTLIER PACED machine_waits busy_gap step_pace group_window pace run_pace moved machine_pause",
    "harness.machine.drift": "READINGS AT_LEAST same_engine EngineReadings measure_engine _geomean step_timing",
}.items():
    for n in names.split():
        ROUTE[n] = mod
SKIP = {"harness/judge/timing.py", "harness/judge/bounds.py", "harness/judge/baselines.py", "harness/machine/pace.py", "harness/machine/drift.py"}
ATTR = re.compile(r"(?<![\w.])timing\.(" + "|".join(sorted(ROUTE, key=len, reverse=True)) + r")\b")
FROM = re.compile(r"^(\s*)from harness\.judge\.timing import (.+)$")
for f in subprocess.run(["git", "ls-files", "*.py"], capture_output=True, text=True).stdout.split():
    if f in SKIP:
        continue
    p = Path(f); s = p.read_text(); orig = s
    used = {}
    def attr(m):
        used.setdefault(ROUTE[m.group(1)], set()).add(m.group(1)); return m.group(1)
    if re.search(r"from harness\.judge import timing", s):
        s = ATTR.sub(attr, s)
    lines = s.split("\n"); out = []
    for line in lines:
        m = FROM.match(line)
        if m and "(" not in m.group(2):
            ind = m.group(1); names = [n.strip() for n in m.group(2).split(",")]
            keep = [n for n in names if n.split(" as ")[0] not in ROUTE]
            moved = {}
            for n in names:
                if n.split(" as ")[0] in ROUTE:
                    moved.setdefault(ROUTE[n.split(" as ")[0]], []).append(n)
            if keep:
                out.append(f"{ind}from harness.judge.timing import {', '.join(keep)}")
            for mod, ns in moved.items():
                out.append(f"{ind}from {mod} import {', '.join(ns)}")
            continue
        out.append(line)
        if used and re.match(r"^(\s*)from harness\.judge import timing\b", line):
            ind = re.match(r"^(\s*)", line).group(1)
            for mod, ns in sorted(used.items()):
                out.append(f"{ind}from {mod} import {', '.join(sorted(ns))}")
            used = {}
    s = "\n".join(out)
    if s != orig:
        p.write_text(s); print("rewrote", f)
