from pathlib import Path
P = Path("harness/cli.py")
L = P.read_text().split("\n")
def idx(prefix, start=0):
    return next(i for i in range(start, len(L)) if L[i].startswith(prefix))
imports = L[idx("from __future__"):idx("SCHEMA_PATH")]
a, b = idx("def _run_or_suite("), idx("def lab_parser(")
body = L[a:b]
Path("harness/suite.py").write_text("\n".join(['"""`streamlab scenario run` and `streamlab scenario suite`: one scenario, or the library, run and',
  'judged with what a person or a CI log needs to follow it (a bar or a heartbeat, the table,',
  'parity\'s table and spread). harness/cli.py parses the command line."""', ""] + imports + ["", ""] + body).rstrip() + "\n")
P.write_text("\n".join(L[:a] + L[b:]))
