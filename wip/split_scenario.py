from pathlib import Path
P = Path("harness/format/scenario.py")
L = P.read_text().split("\n")
def idx(prefix, start=0):
    return next(i for i in range(start, len(L)) if L[i].startswith(prefix))
imports = L[idx("from __future__"):idx("SCENARIOS_DIR")]
a, b = idx("# ---- expectations ----"), idx("class EngineErrorFault(")
expect = L[a + 1:b]
Path("harness/format/expect.py").write_text("\n".join(['"""What a scenario expects of its run (its `expect:` block): outcomes per group, latency bounds,',
  'release and waste bounds, parity\'s tolerances, goodput. The checks that judge them are',
  'harness/judge/; every check\'s name is harness/format/check_names.py."""', ""] + imports + ["", ""] + expect).rstrip() + "\n")
names = [l.split("(")[0].split()[1] for l in expect if l.startswith("class ")] + [l.split(" =")[0] for l in expect if l[:1].isupper() and " = " in l]
rest = L[:a] + ["from harness.format.expect import " + ", ".join(names), "", ""] + L[b:]
P.write_text("\n".join(rest))
print(" ".join(names))
