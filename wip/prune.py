"""Drop the imports pyflakes calls unused in the given files (only `import x` / `from x import a, b` lines)."""
import re, subprocess, sys
from pathlib import Path
files = sys.argv[1:]
out = subprocess.run(["/work/i37-tools/venv/bin/pyflakes", *files], capture_output=True, text=True).stdout
unused = {}
for line in out.splitlines():
    m = re.match(r"(.+?):(\d+):\d+: '(.+)' imported but unused", line)
    if m:
        unused.setdefault(m.group(1), []).append((int(m.group(2)), m.group(3)))
for f, items in unused.items():
    lines = Path(f).read_text().split("\n")
    for no, dotted in items:
        text = lines[no - 1]
        name = dotted.rsplit(".", 1)[-1]
        m = re.match(r"^(\s*)from (\S+) import (.+)$", text)
        if m:
            names = [n.strip() for n in m.group(3).split(",")]
            names = [n for n in names if n.split(" as ")[-1].strip() != name]
            lines[no - 1] = f"{m.group(1)}from {m.group(2)} import {', '.join(names)}" if names else None
        elif re.match(r"^\s*import ", text):
            lines[no - 1] = None
    Path(f).write_text("\n".join(l for l in lines if l is not None))
