from pathlib import Path
P = Path("harness/judge/checks.py")
L = P.read_text().split("\n")
def idx(prefix, start=0):
    return next(i for i in range(start, len(L)) if L[i].startswith(prefix))
imports = L[idx("from __future__"):idx("@implements")]
a = idx("@implements(\"healthy\", outside=True)")
nobs = idx("def not_observable(")
body = L[a:]
Path("harness/judge/target_checks.py").write_text("\n".join(['"""The checks on a target, read from outside (harness.targets.watch records what they read): its',
  'health, its load gauges for leaks and release times, its capacity before and after the run.',
  'Registered by name (harness.judge.registry.implements) beside our own server\'s checks."""', ""] + imports + ["", ""] + body).rstrip() + "\n")
rest = L[:a]
P.write_text("\n".join(rest).rstrip() + "\n")
