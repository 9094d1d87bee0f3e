"""Reading a scenario file: YAML to a validated Scenario, or an error that names the file, the
line, the field and what was expected; and the format's JSON schema."""

from __future__ import annotations

from pathlib import Path

import yaml
from pydantic import ValidationError

from harness.format.strict import FieldProblem, FieldProblems

from harness.format.scenario import SCENARIOS_DIR, Scenario



class ScenarioError(ValueError):
    """A scenario file with a mistake: the message names the file, the line and the field."""


def load_by_name(name: str) -> Scenario:
    return load(SCENARIOS_DIR / f"{name}.yaml")


def _line_of(root: yaml.Node | None, loc: tuple) -> int | None:
    node, line = root, (root.start_mark.line + 1 if root is not None else None)
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            match = next((v for k, v in node.value if k.value == part), None)
            if match is None:
                continue  # a union tag or a model name pydantic adds: not in the file
            node = match
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            node = node.value[part]
        else:
            continue
        line = node.start_mark.line + 1
    return line


NEWLINE = b"\n"


def _field_part(p) -> str:
    """A path part as it reads in an error: a plain key as itself, anything odd (an empty key,
    one with spaces or a newline) quoted, so the message stays one line that names it."""
    return p if isinstance(p, str) and p.replace("_", "a").isalnum() and p.isascii() else \
        str(p) if isinstance(p, int) else repr(p)


def load(path: str | Path) -> Scenario:
    path = Path(path)
    try:
        raw = path.read_bytes()
        text = raw.decode("utf-8")
        data = yaml.safe_load(text)
        root = yaml.compose(text)
    except OSError as exc:
        raise ScenarioError(f"{path}: cannot read: {exc}") from None
    except UnicodeDecodeError as exc:  # found by fuzzing: a traceback before
        line = raw[:exc.start].count(NEWLINE) + 1
        raise ScenarioError(f"{path}:{line}: not UTF-8 text (byte {exc.start})") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        raise ScenarioError(f"{where}: not valid YAML: {getattr(exc, 'problem', exc)}") from None
    if not isinstance(data, dict):
        raise ScenarioError(f"{path}:1: a scenario is a mapping with at least `name` and `groups`")
    try:
        scenario = Scenario.model_validate(data)
    except ValidationError as exc:
        lines = []
        for err in exc.errors():
            problem = err.get("ctx", {}).get("error")
            each = problem.problems if isinstance(problem, FieldProblems) else [problem]
            for one in each:
                loc = tuple(err["loc"]) + (one.loc if isinstance(one, FieldProblem) else ())
                msg = str(one) if isinstance(one, FieldProblem) else err["msg"]
                field = ".".join(_field_part(p) for p in loc) or "(top level)"
                lines.append(f"{path}:{_line_of(root, loc)}: {field}: {msg}")
        raise ScenarioError("\n".join(lines)) from None
    if scenario.name != path.stem:
        raise ScenarioError(f"{path}:{_line_of(root, ('name',))}: name: is {scenario.name!r}, expected the file's "
                            f"stem {path.stem!r}")
    return scenario


def json_schema() -> dict:
    schema = Scenario.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "streamlab scenario"
    return schema
