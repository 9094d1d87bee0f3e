"""The generated parts of scenarios/README.md, so that it stays complete for a first author: the
checks table (from harness/judge/registry.py) and the field reference (every field of the format, from
the JSON Schema that harness/format/'s models make). `streamlab scenario schema --write` writes
them with schema.json; tests/test_scenario.py fails when either is stale."""

from __future__ import annotations

import json
from pathlib import Path

from harness.judge.registry import checks_table
from harness.format.scenario import SCENARIOS_DIR
from harness.format.load import json_schema

README = SCENARIOS_DIR / "README.md"
MARKS = {  # section -> (begin, end) markers in the README
    "checks": ("<!-- the checks table: written by `streamlab scenario schema --write` from harness/judge/registry.py -->",
               "<!-- end of the checks table -->"),
    "fields": ("<!-- the field reference: written by `streamlab scenario schema --write` from the models -->",
               "<!-- end of the field reference -->"),
}


def _type(spec: dict) -> str:
    if "$ref" in spec:
        return spec["$ref"].rpartition("/")[2]
    if "const" in spec:
        return json.dumps(spec["const"])
    if "enum" in spec:
        return " \\| ".join(json.dumps(v) for v in spec["enum"])
    for key in ("anyOf", "oneOf"):
        if key in spec:
            return " \\| ".join(_type(s) for s in spec[key] if s.get("type") != "null") + \
                (" or null" if any(s.get("type") == "null" for s in spec[key]) else "")
    if spec.get("type") == "array":
        return f"list of {_type(spec.get('items', {}))}" if "items" in spec else \
            "[" + ", ".join(_type(s) for s in spec.get("prefixItems", [])) + "]"
    if spec.get("type") == "object":
        extra = spec.get("additionalProperties")
        return f"map to {_type(extra)}" if isinstance(extra, dict) else "object"
    return spec.get("type", "any")


def field_reference() -> str:
    """A table per part of the format: each field, its type, its default and what it means."""
    schema = json_schema()
    parts = [("Scenario", schema)] + sorted(schema.get("$defs", {}).items())
    out = []
    for name, spec in parts:
        props = spec.get("properties")
        if not props:
            continue
        out += [f"**{name}**" + (f": {spec['description'].splitlines()[0]}" if spec.get("description") else ""), "",
                "| field | type | default | what |", "|---|---|---|---|"]
        for field, p in props.items():
            default = ("required" if field in spec.get("required", []) else
                       json.dumps(p["default"]) if "default" in p else "-")
            what = (p.get("description") or "").replace("|", "\\|").replace("\n", " ")
            out.append(f"| `{field}` | {_type(p)} | {default} | {what} |")
        out.append("")
    return "\n".join(out).rstrip()


def generated(text: str) -> str:
    """The README's text with every generated section as the code makes it now."""
    sections = {"checks": checks_table(), "fields": field_reference()}
    for key, (begin, end) in MARKS.items():
        head, found, rest = text.partition(begin)
        if not found:
            raise ValueError(f"{README}: the marker {begin!r} is missing")
        _, _, tail = rest.partition(end)
        text = f"{head}{begin}\n{sections[key]}\n{end}{tail}"
    return text


def write_readme() -> Path:
    README.write_text(generated(README.read_text()))
    return README
