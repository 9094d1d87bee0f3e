from pathlib import Path
P = Path("harness/format/target.py")
L = P.read_text().split("\n")
def idx(prefix):
    return next(i for i, l in enumerate(L) if l.startswith(prefix))
imports = L[idx("from __future__"):idx("# VLLM_TARGET_DEVICE")]
a, b = idx("# The scenarios our own server is run on"), idx("def resolve_target(")
g = idx("@dataclass(frozen=True)")
findings = L[a:b]
gauges = L[g:]
rest = L[:a] + L[b:g]
Path("harness/targets/findings.py").write_text("\n".join(['"""What each real peer does where a check fails on it, measured here: asserted findings, runs',
  'that need a fresh server, verdicts that move between runs (reported, not asserted), and the checks',
  "the peer tables show. The scenario format's targets are harness/format/target.py.", '"""', ""] + imports + ["", ""] + findings).rstrip() + "\n")
Path("harness/targets/gauges.py").write_text("\n".join(['"""A target\'s load gauges read from its metrics (Prometheus text, or llama.cpp\'s /slots JSON)',
  'as its profile names them (harness.format.target.Gauges)."""', ""] + imports + ["from harness.format.target import Gauges", "", ""] + gauges).rstrip() + "\n")
P.write_text("\n".join(rest).rstrip() + "\n")
