"""The packages' import graph: no cycle anywhere in streamlab/ or harness/, lazy imports included
(type-only ones, under `if TYPE_CHECKING:`, never run and are left out),
and the service never imports the harness (its `scenario` and `lab` commands are entry points)."""

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


def import_graph() -> dict[str, set[str]]:
    """Module -> the modules of ours it imports anywhere in its file (inside functions too)."""
    mods = modules()
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for name, path in mods.items():
        tree = ast.parse(path.read_text(), str(path))
        type_only = {id(n) for block in ast.walk(tree) if isinstance(block, ast.If) and _is_type_checking(block.test)
                     for stmt in block.body for n in ast.walk(stmt)}
        for node in ast.walk(tree):
            if id(node) in type_only:  # `if TYPE_CHECKING:` imports never run
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


def test_the_walk_finds_a_cycle_when_there_is_one():
    graph = import_graph()
    graph["harness.record.verdict"] = graph["harness.record.verdict"] | {"harness.run.runner"}  # runner -> checks -> verdict
    assert any("harness.record.verdict" in c and "harness.run.runner" in c for c in cycles(graph))


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
