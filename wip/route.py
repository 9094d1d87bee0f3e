"""python route.py OLD_MODULE NEW_MODULE NAME...: `from OLD import ...` lines that name NAMEs import them from NEW."""
import re, subprocess, sys
from pathlib import Path
old, new, names = sys.argv[1], sys.argv[2], set(sys.argv[3:])
pat = re.compile(rf"^(\s*)from {re.escape(old)} import (.+)$")
for f in subprocess.run(["git", "ls-files", "*.py"], capture_output=True, text=True).stdout.split():
    if f.replace("/", ".").removesuffix(".py") in (old, new):
        continue
    p = Path(f); lines = p.read_text().split("\n"); changed = False
    for i, line in enumerate(lines):
        m = pat.match(line)
        if not m or "(" in m.group(2):
            continue
        got = [n.strip() for n in m.group(2).split(",")]
        moved = [n for n in got if n.split(" as ")[0] in names]
        if not moved:
            continue
        keep = [n for n in got if n not in moved]
        out = ([f"{m.group(1)}from {old} import {', '.join(keep)}"] if keep else []) + [f"{m.group(1)}from {new} import {', '.join(moved)}"]
        lines[i] = "\n".join(out); changed = True
    if changed:
        p.write_text("\n".join(lines)); print("routed", f)
