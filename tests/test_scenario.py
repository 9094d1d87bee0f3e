import json
from pathlib import Path

import pytest

from harness.format.scenario import SCENARIOS_DIR
from harness.format.load import ScenarioError, json_schema, load

# Times nothing (read for it): may run beside another such item under xdist (harness/cores_lock.py).
pytestmark = pytest.mark.shares_cores

GOOD = """\
name: {name}
seed: 1
groups:
  - name: readers
    count: 2
    behaviour: {{kind: reader}}
"""


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    return path


def test_a_minimal_scenario_loads_with_defaults(tmp_path):
    s = load(write(tmp_path, "mini", GOOD.format(name="mini")))
    assert s.groups[0].arrival.kind == "at_once" and s.modes == ["sim", "live"]
    assert s.expect.leak_free and s.expect.exactly_once and s.expect.identity


@pytest.mark.parametrize("text,line,field,expected", [
    (GOOD.format(name="bad") + "    arrival: {kind: sometimes}\n", 7, "groups.0.arrival", "at_once"),
    (GOOD.format(name="bad").replace("count: 2", "count: many"), 5, "groups.0.count", "valid integer"),
    (GOOD.format(name="bad").replace("kind: reader", "kind: skimmer"), 6, "groups.0.behaviour", "'sleeper'"),
    (GOOD.format(name="bad") + "colour: blue\n", 7, "colour", "Extra inputs are not permitted"),
    (GOOD.format(name="bad") + "server: {policy: polite}\n", 7, "server.policy", "'pause_then_drop'"),
    (GOOD.format(name="bad").replace("behaviour: {kind: reader}",
                                     "behaviour: {kind: dropper, close: fin}"), 6, "groups.0.behaviour",
     "exactly one of after_tokens"),
])
def test_errors_name_the_file_the_line_the_field_and_what_was_expected(tmp_path, text, line, field, expected):
    path = write(tmp_path, "bad", text)
    with pytest.raises(ScenarioError) as err:
        load(path)
    message = str(err.value)
    assert f"{path}:{line}: {field}" in message and expected in message, message


def test_name_must_match_the_file(tmp_path):
    with pytest.raises(ScenarioError, match=r"other.yaml:1: name: is 'mini', expected the file's stem 'other'"):
        load(write(tmp_path, "other", GOOD.format(name="mini")))


def test_yaml_syntax_errors_name_the_line(tmp_path):
    with pytest.raises(ScenarioError, match=r"broken.yaml:4: not valid YAML: expected the node content"):
        load(write(tmp_path, "broken", "name: broken\ngroups:\n  - {name: a, count: [\n"))


def test_references_to_unknown_groups_and_live_only_toxics_in_sim_are_refused(tmp_path):
    text = GOOD.format(name="refs") + "expect: {finish_reasons: {ghosts: {length: 1}}}\n"
    with pytest.raises(ScenarioError, match="unknown group 'ghosts'"):
        load(write(tmp_path, "refs", text))
    text = GOOD.format(name="net") + "    network: {toxics: [{type: reset_peer, timeout_ms: 10}]}\n"
    with pytest.raises(ScenarioError, match="reset_peer can only run live"):
        load(write(tmp_path, "net", text))
    assert load(write(tmp_path, "net", text.replace("seed: 1", "seed: 1\nmodes: [live]"))).modes == ["live"]


def test_every_mistake_of_a_file_is_reported_at_once_and_outcome_names_are_checked(tmp_path):
    text = GOOD.format(name="many") + """\
expect:
  finish_reasons: {ghosts: {length: 1}, readers: {lenght: 2}}
  outcomes_vary: {reason: under overload it varies, groups: [readers], allowed: [length, refusd]}
"""
    with pytest.raises(ScenarioError) as err:
        load(write(tmp_path, "many", text))
    lines = str(err.value).splitlines()
    assert len(lines) == 4, lines
    assert any("finish_reasons.ghosts: names unknown group 'ghosts'" in x for x in lines)
    assert any("finish_reasons.readers.lenght: unknown outcome 'lenght'" in x for x in lines)
    assert any("outcomes_vary.allowed.1: unknown outcome 'refusd'" in x for x in lines)
    # counts and `outcomes_vary` for one group: the counts would go unchecked without a word
    assert any("outcomes_vary.groups.0: 'readers' also has counts in finish_reasons" in x for x in lines)


def test_a_server_error_is_never_an_expected_refusal(tmp_path):
    from harness.judge.checks import finish_reasons
    from harness.record.trace import StreamRecord
    from tests.helpers import client_trace

    text = GOOD.format(name="bad5").replace("behaviour: {kind: reader}", "behaviour: {kind: bad_request, send: "
                                            "malformed_json, expect_status: 500, expect_error: x}")
    with pytest.raises(ScenarioError, match="less than or equal to 499"):
        load(write(tmp_path, "bad5", text))
    scenario = load(write(tmp_path, "vary", GOOD.format(name="vary") + "expect: {outcomes_vary: {reason: it is "
                                                                        "overload, groups: [readers], allowed: [length, refused]}}\n"))
    streams = [StreamRecord("readers", i, "reader", "p", {}, status=status) for i, status in enumerate((429, 500))]
    check = finish_reasons(scenario, client_trace("vary", "sim", streams))
    assert not check.passed and "server_error" in check.details[0], check.line()


def test_every_shipped_scenario_loads():
    files = sorted(SCENARIOS_DIR.glob("*.yaml"))
    assert len(files) >= 40
    for path in files:
        assert load(path).name == path.stem


def test_published_json_schema_is_current():
    published = json.loads((SCENARIOS_DIR / "schema.json").read_text())
    assert published == json_schema(), "run `streamlab scenario schema --write` and commit scenarios/schema.json"


def test_the_readmes_checks_table_and_field_reference_are_current():
    """scenarios/README.md is complete for a first author: every check (from the registry) and
    every field of the format (from the schema) is in it as the code declares it now."""
    from harness.scenario_docs import README, generated
    text = README.read_text()
    assert generated(text) == text, "run `streamlab scenario schema --write` and commit scenarios/README.md"


def _section(text: str, title: str) -> str:
    start = text.index(f"## {title}")
    return text[start:text.index("\n## ", start + 1)]


def test_the_readmes_narrative_names_every_behaviour_arrival_and_toxic():
    """The hand-written sections a first author reads (a worked example per behaviour, the
    arrivals table, the network paragraph) name every kind the format takes, read from the models."""
    import typing

    from harness.format.arrivals import Arrival
    from harness.format.behaviours import BEHAVIOURS
    from harness.scenario_docs import README
    from harness.format.toxics import ToxicSpec

    def kinds(union, field: str) -> set[str]:
        members = typing.get_args(typing.get_args(union)[0])
        return {typing.get_args(m.model_fields[field].annotation)[0] for m in members}
    text = README.read_text()
    behaviours = _section(text, "Behaviours")
    assert [k for k in BEHAVIOURS if f"**{k}**" not in behaviours or f"kind: {k}" not in behaviours] == []
    arrivals = _section(text, "Arrivals")
    assert [k for k in kinds(Arrival, "kind") if f"| `{k}` |" not in arrivals] == []
    network = _section(text, "Network")
    assert [t for t in kinds(ToxicSpec, "type") if f"`{t}`" not in network] == []
