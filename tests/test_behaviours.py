"""A behaviour owns what it means (harness/format/behaviours/): every other module asks its
traits, never its kind. A new behaviour is its module and one line in the registry."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from harness.format.behaviours import BEHAVIOURS, BehaviourModel

pytestmark = pytest.mark.shares_cores  # reads source: no clock

ROOT = Path(__file__).resolve().parent.parent
OWN = ROOT / "harness" / "format" / "behaviours"


def _names_a_behaviour(node: ast.AST) -> bool:
    """`x.behaviour.kind`, `behaviour.kind`, `b.kind` of a behaviour, or `g["behaviour"]["kind"]`."""
    if isinstance(node, ast.Attribute) and node.attr == "kind":
        inner = node.value
        text = ast.unparse(inner)
        return "behaviour" in text or text in ("b",)
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and node.slice.value == "kind":
        return "behaviour" in ast.unparse(node.value)
    return False


def kind_tests(source: str) -> list[str]:
    """Where `source` tests a behaviour by its kind or its class."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare) and any(_names_a_behaviour(n) for n in [node.left, *node.comparators]):
            found.append(f"{node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.Call) and ast.unparse(node.func) == "isinstance" and len(node.args) == 2:
            classes = {c.__name__ for c in BEHAVIOURS.values()}
            named = {n.id for n in ast.walk(node.args[1]) if isinstance(n, ast.Name)}
            if named & classes:
                found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_module_outside_the_behaviours_tests_a_behaviours_kind():
    found = {str(p.relative_to(ROOT)): kind_tests(p.read_text()) for p in (ROOT / "harness").rglob("*.py")
             if OWN not in p.parents}
    assert {k: v for k, v in found.items() if v} == {}


def test_the_grep_finds_a_kind_test():
    source = ('if pc.group.behaviour.kind == "bad_request": pass\n'
              'ok = isinstance(group.behaviour, Reconnector)\n'
              'leaving = [g for g in groups if g["behaviour"]["kind"] in ("dropper",)]\n')
    assert len(kind_tests(source)) == 3


def test_every_behaviour_is_registered_and_declares_its_traits_on_its_class():
    traits = [k for k, v in vars(BehaviourModel).items() if not k.startswith("_") and isinstance(v, bool)]
    assert {"owns_exchange", "refused", "resumes", "leaves_early", "waits_for_end"} <= set(traits)
    for kind, cls in BEHAVIOURS.items():
        assert cls.model_fields["kind"].annotation.__args__ == (kind,)
        assert (OWN / f"{kind}.py").exists(), kind  # its own module
