"""Issue 37, step 1: move harness modules into packages by job and rewrite every reference.
Whole modules only (the splits of timing, targets, registry, profile, simulation come after)."""
import re, subprocess, sys
from pathlib import Path

ROOT = Path(sys.argv[1])
MOVES = {
    "trace": "record.trace", "verdict": "record.verdict",
    "cores": "machine.cores", "cpu_quota": "machine.cpu_quota", "speed": "machine.speed", "lag": "machine.lag",
    "profile": "machine.cost_model",
    "strict": "format.strict", "arrivals": "format.arrivals", "trace_arrivals": "format.trace_arrivals",
    "toxics": "format.toxics", "targets": "format.target", "behaviours": "format.behaviours", "scenario": "format.scenario",
    "plan": "clients.plan", "clients": "clients.client", "wire": "clients.wire", "rawhttp": "clients.rawhttp",
    "h2client": "clients.h2client",
    "engines": "targets.engines", "target_scope": "targets.scope", "target_watch": "targets.watch",
    "clock": "sim.clock", "asgi": "sim.asgi", "simulation": "sim.backend",
    "live": "live.process", "zygote": "live.zygote", "faults": "live.toxiproxy", "nginx": "live.nginx",
    "loops": "live.loops", "lab": "live.lab", "live_run": "live.backend", "shards": "live.shards",
    "shard_worker": "live.shard_worker",
    "timing": "judge.timing", "baseline": "judge.baselines", "registry": "judge.registry", "checks": "judge.checks",
    "report": "judge.report",
    "backend": "run.backend", "runner": "run.runner", "references": "run.references", "capacity": "run.capacity",
    "swarm": "swarm.search", "swarm_draw": "swarm.draw", "swarm_properties": "swarm.properties",
    "swarm_target": "swarm.target", "swarm_report": "swarm.report",
    "machine": "fit.machine", "calibrate": "fit.calibrate",
}
NAME = "|".join(sorted(MOVES, key=len, reverse=True))

def git_mv():
    for old, new in MOVES.items():
        src = ROOT / "harness" / (old if old == "behaviours" else f"{old}.py")
        dst = ROOT / "harness" / (new.replace(".", "/") + ("" if old == "behaviours" else ".py"))
        dst.parent.mkdir(parents=True, exist_ok=True)
        init = dst.parent / "__init__.py"
        if not init.exists():
            init.write_text("")
            subprocess.run(["git", "add", str(init)], cwd=ROOT, check=True)
        subprocess.run(["git", "mv", str(src), str(dst)], cwd=ROOT, check=True)

FROM_PKG = re.compile(r"^(\s*)from harness import (.+?)(\s*#.*)?$")
DOTTED = re.compile(rf"\bharness([./])({NAME})(?![A-Za-z0-9_])")

def rewrite_from_pkg(line):
    m = FROM_PKG.match(line)
    if not m or "(" in m.group(2):
        return line
    indent, names, comment = m.group(1), [n.strip() for n in m.group(2).split(",")], m.group(3) or ""
    out, rest = [], []
    for n in names:
        base, _, alias = n.partition(" as ")
        base = base.strip()
        if base in MOVES:
            pkg, mod = MOVES[base].rsplit(".", 1)
            local = alias.strip() or base
            out.append(f"{indent}from harness.{pkg} import {mod}" + ("" if mod == local else f" as {local}"))
        else:
            rest.append(n)
    if rest:
        out.insert(0, f"{indent}from harness import {', '.join(rest)}")
    out[-1] += comment
    return "\n".join(out)

def rewrite(text):
    def sub(m):
        sep, name = m.group(1), m.group(2)
        new = MOVES[name]
        return "harness" + sep + (new.replace(".", "/") if sep == "/" else new)
    text = DOTTED.sub(sub, text)  # first: what the next pass writes names packages, not old modules
    return "\n".join(rewrite_from_pkg(l) for l in text.split("\n"))

if __name__ == "__main__":
    git_mv()
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True).stdout.split()
    changed = 0
    for f in files:
        p = ROOT / f
        if p.suffix not in (".py", ".md", ".toml", ".yaml", ".json", ".txt", ".cfg") and f not in ("scripts/dev",):
            continue
        if not p.is_file():
            continue
        t = p.read_text()
        n = rewrite(t)
        if n != t:
            p.write_text(n); changed += 1
    print("files changed", changed)
