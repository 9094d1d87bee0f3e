from pathlib import Path
P = Path("harness/format/scenario.py")
L = P.read_text().split("\n")
def idx(prefix, start=0):
    return next(i for i in range(start, len(L)) if L[i].startswith(prefix))
imports = L[idx("from __future__"):idx("SCENARIOS_DIR")]
a = idx("# ---- loading ----")
body = L[a + 1:]
Path("harness/format/load.py").write_text("\n".join(['"""Reading a scenario file: YAML to a validated Scenario, or an error that names the file, the',
  'line, the field and what was expected; and the format\'s JSON schema."""', ""] + imports + ["from harness.format.scenario import SCENARIOS_DIR, Scenario", "", ""] + body).rstrip() + "\n")
P.write_text("\n".join(L[:a]).rstrip() + "\n")
names = [l.split("(")[0].split()[1] for l in body if l.startswith(("class ", "def "))] + [l.split(" =")[0] for l in body if l[:1].isupper() and " = " in l]
print(" ".join(n for n in names if not n.startswith("_")))
