"""The packages' import graph: no cycle anywhere in streamlab/ or harness/, lazy and type-only
imports (under `if TYPE_CHECKING:`) included; the harness's packages import only downwards in
their layer order (docs/LAYOUT.md draws it); and the service never imports the harness (its
`scenario` and `lab` commands are entry points)."""

from __future__ import annotations

import pytest

import ast
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

# Times nothing (read for it): may run beside another such item under xdist (harness/cores_lock.py).
pytestmark = pytest.mark.shares_cores

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("streamlab", "harness")


def modules() -> dict[str, Path]:
    out = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            out[name.removesuffix(".__init__")] = path
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def import_graph(type_only: bool = True) -> dict[str, set[str]]:
    """Module -> the modules of ours it imports anywhere in its file (inside functions too, and
    under `if TYPE_CHECKING:` unless type_only is False: a type-only edge is a dependency of the
    code's meaning even where it never runs)."""
    mods = modules()
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for name, path in mods.items():
        tree = ast.parse(path.read_text(), str(path))
        type_checking = {id(n) for block in ast.walk(tree) if isinstance(block, ast.If) and _is_type_checking(block.test)
                     for stmt in block.body for n in ast.walk(stmt)}
        for node in ast.walk(tree):
            if id(node) in type_checking and not type_only:
                continue
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [node.module] + [f"{node.module}.{a.name}" for a in node.names]  # `from pkg import mod`
            else:
                continue
            for target in targets:
                while target and target not in mods:
                    target = target.rpartition(".")[0]
                if target and target != name and not name.startswith(target + "."):  # a package's own __init__
                    graph[name].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycle_in_either_package():
    assert cycles(import_graph()) == []


# The harness's packages, lowest first: each imports only from those before it. Packages in one
# tuple are siblings and never import each other; the judge is pure (its verdicts read traces and
# scenarios, never a transport, a process or another server). Modules at the root (cli, collect,
# progress, cores_lock, times, scenario_docs, targets_report) are the faces, above everything.
LAYERS = [("record",), ("machine",), ("format",), ("clients",), ("targets",), ("sim", "live"), ("judge",),
          ("run",), ("swarm", "fit", "compare")]
JUDGE_NEVER = {"clients", "targets", "sim", "live"}


def layer_of(module: str) -> tuple[int, str]:
    """(its layer's index, its package) for a harness module; the faces are above every layer."""
    parts = module.split(".")
    if len(parts) > 2 or (len(parts) == 2 and any(parts[1] in layer for layer in LAYERS)):
        package = parts[1]
        return next(i for i, layer in enumerate(LAYERS) if package in layer), package
    return len(LAYERS), "faces"


def layer_violations(graph: dict[str, set[str]]) -> list[str]:
    out = []
    for module, targets in graph.items():
        if not module.startswith("harness."):
            continue
        mine, package = layer_of(module)
        for target in targets:
            if not target.startswith("harness."):
                continue
            theirs, their_package = layer_of(target)
            if their_package == package:
                continue
            if theirs > mine or (theirs == mine and package != "faces"):
                out.append(f"{module} -> {target}: {package} may not import {their_package}")
            elif package == "judge" and their_package in JUDGE_NEVER:
                out.append(f"{module} -> {target}: the judge imports no {their_package}")
    return sorted(out)


def test_the_harness_imports_only_downwards_in_its_layers():
    assert layer_violations(import_graph()) == []
    unplaced = sorted(m for m in modules() if m.startswith("harness.") and m.count(".") > 1
                      and layer_of(m)[1] == "faces")
    assert unplaced == [], "a package that is not in LAYERS"


def test_the_layer_check_finds_an_upward_import():
    graph = import_graph()
    graph["harness.record.trace"] = graph["harness.record.trace"] | {"harness.judge.checks"}
    graph["harness.sim.clock"] = graph["harness.sim.clock"] | {"harness.live.loops"}
    assert layer_violations(graph) == [
        "harness.record.trace -> harness.judge.checks: record may not import judge",
        "harness.sim.clock -> harness.live.loops: sim may not import live"]


def test_the_walk_finds_a_cycle_when_there_is_one():
    graph = import_graph()
    graph["harness.record.verdict"] = graph["harness.record.verdict"] | {"harness.run.runner"}  # runner -> checks -> verdict
    assert any("harness.record.verdict" in c and "harness.run.runner" in c for c in cycles(graph))


# The service's rooms, lowest first: the engine (and the model it runs) knows no stream; the hub
# knows the engine and no route; the routes and responses sit above both (docs/LAYOUT.md).
SERVICE_BELOW_HUB = "streamlab.engine"
SERVICE_ABOVE_HUB = ("streamlab.app", "streamlab.serving_routes", "streamlab.operator_routes", "streamlab.lab_routes",
                     "streamlab.responses", "streamlab.server", "streamlab.metrics")


def service_violations(graph: dict[str, set[str]]) -> list[str]:
    out = []
    for module, targets in graph.items():
        for target in targets:
            if module.startswith(SERVICE_BELOW_HUB + ".") and target.startswith(("streamlab.hub", *SERVICE_ABOVE_HUB)):
                out.append(f"{module} -> {target}: the engine knows no stream or route")
            elif module.startswith("streamlab.hub") and target.startswith(SERVICE_ABOVE_HUB):
                out.append(f"{module} -> {target}: the hub knows no route")
    return sorted(out)


def test_the_service_imports_from_the_routes_to_the_hub_to_the_engine():
    assert service_violations(import_graph()) == []
    graph = import_graph()
    graph["streamlab.engine.scheduler"] = graph["streamlab.engine.scheduler"] | {"streamlab.hub.streams"}
    graph["streamlab.hub.delivery"] = graph["streamlab.hub.delivery"] | {"streamlab.responses"}
    assert service_violations(graph) == [  # the check sees an upward import
        "streamlab.engine.scheduler -> streamlab.hub.streams: the engine knows no stream or route",
        "streamlab.hub.delivery -> streamlab.responses: the hub knows no route"]


def test_the_service_imports_nothing_from_the_harness():
    leaks = sorted((m, t) for m, targets in import_graph().items() if m.startswith("streamlab")
                   for t in targets if t.startswith("harness"))
    assert leaks == []


def test_streamlab_serve_starts_and_streams_with_the_harness_unimportable():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    blocker = ("import sys; sys.modules['harness'] = None; from streamlab.cli import main; "
               f"sys.exit(main(['serve', '--model', 'tiny', '--port', '{port}', '--log-level', 'warning']))")
    proc = subprocess.Popen([sys.executable, "-c", blocker], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as r:
                    if json.loads(r.read())["status"] == "ok":
                        break
            except OSError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate(timeout=10)[0]
            time.sleep(0.1)
        request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/stream", method="POST",
                                         data=json.dumps({"prompt": "Return", "max_new_tokens": 4}).encode(),
                                         headers={"content-type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as r:
            body = r.read().decode()
        assert body.count("event: token") == 4 and "event: done" in body
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.communicate(timeout=10)


def test_every_module_has_its_test_file_or_a_line_in_the_test_readme():
    """Tests mirror modules: `x.py` is covered by tests/test_x.py, or tests/README.md names the
    tests that cover it (a row that starts with the module's dotted name)."""
    readme = (ROOT / "tests" / "README.md").read_text()
    listed = {line.split("|")[1].strip(" `") for line in readme.splitlines() if line.startswith("|")}
    missing = sorted(m for m, path in modules().items()
                     if path.read_text().strip() and not (ROOT / "tests" / f"test_{m.rsplit('.', 1)[-1]}.py").exists()
                     and m not in listed)
    assert missing == [], "each needs tests/test_<name>.py or a row in tests/README.md"


LONGEST = 350  # lines; a module past it is listed in docs/LAYOUT.md ("Module length") with its reason


def test_no_module_is_over_350_lines_unless_the_docs_say_why():
    import re

    listed = set(re.findall(r"^\| `([\w/.]+\.py)` \|", (ROOT / "docs" / "LAYOUT.md").read_text(), re.M))
    long = {str(path.relative_to(ROOT)) for folder in ("streamlab", "harness", "tests", "benchmarks", "scripts")
            for path in (ROOT / folder).rglob("*.py") if len(path.read_text().splitlines()) > LONGEST}
    assert long - listed == set(), "over 350 lines without a line in docs/LAYOUT.md saying why"
    assert listed - long == set(), "docs/LAYOUT.md lists a module that is no longer long"


def test_the_readme_is_a_front_door_of_at_most_150_lines():
    # Issue 37: what it is, a first run, your own server, the two commands, links; the rest in docs/.
    assert len((ROOT / "README.md").read_text().splitlines()) <= 150
