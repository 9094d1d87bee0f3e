"""The `trace` arrival kind: arrival times, prompt and output lengths replayed from a request
trace, mapped onto our model as the format states; a trace that cannot be read is refused at load."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.format.arrivals import TraceArrival
from harness.clients.plan import plan, tokenizer_for
from harness.format.load import ScenarioError, load
from harness.format.trace_arrivals import read_trace, shipped_traces

# Times nothing (read for it): may run beside another such item under xdist (harness/cores_lock.py).
pytestmark = pytest.mark.shares_cores

SCENARIO = """\
name: {name}
seed: 3
groups:
  - name: replayed
    count: {count}
    behaviour: {{kind: reader}}
    arrival: {arrival}
"""


def write(tmp_path: Path, name: str, count: int, arrival: str) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(SCENARIO.format(name=name, count=count, arrival=arrival))
    return path


def test_the_shipped_excerpts_are_the_first_300_seconds_of_each_service():
    assert shipped_traces() == ["azure_code", "azure_conversation"]
    for name, count in (("azure_code", 781), ("azure_conversation", 1445)):
        rows = read_trace(name, "TIMESTAMP", "ContextTokens", "GeneratedTokens")
        assert len(rows) == count and rows[0][0] == 0.0 and rows[-1][0] < 300
        assert all(a[0] <= b[0] for a, b in zip(rows, rows[1:]))


def test_times_and_lengths_are_the_traces_mapped_as_stated():
    arrival = TraceArrival(kind="trace", trace="azure_conversation", start_s=60, speedup=2)
    rows = read_trace("azure_conversation", "TIMESTAMP", "ContextTokens", "GeneratedTokens")
    taken = [r for r in rows if r[0] >= 60][:10]
    assert arrival.times(10, None) == [(t - 60) / 2 for t, _, _ in taken]
    assert arrival.shapes(10) == [(max(1, min(64, round(p / 32))), max(1, min(32, round(o / 4))))
                                  for _, p, o in taken]


def test_a_jsonl_trace_with_its_own_columns_and_a_window(tmp_path):
    path = tmp_path / "mine.jsonl"
    path.write_text("".join(json.dumps({"t": t, "in": 100 * (i + 1), "out": 8}) + "\n"
                            for i, t in enumerate([5.0, 5.5, 7.0, 20.0])))
    arrival = TraceArrival(kind="trace", trace=str(path), time_column="t", prompt_column="in", output_column="out",
                           start_s=0.5, window_s=3, prompt_scale=0.1, output_scale=1)
    assert arrival.times(2, None) == [0.0, 1.5]  # seconds after start_s (the trace's own count from its first)
    assert arrival.shapes(2) == [(20, 8), (30, 8)]
    with pytest.raises(ValueError, match="2 requests from 0.5 s within 3 s, fewer than the group's count 3"):
        arrival.rows(3)


def test_a_planned_trace_client_has_the_mapped_prompt_length_and_output(tmp_path):
    scenario = load(write(tmp_path, "replay", 6, "{kind: trace, trace: azure_code, start_s: 60, speedup: 4}"))
    tokenizer = tokenizer_for("tiny")
    planned = plan(scenario, tokenizer)
    shapes = scenario.groups[0].arrival.shapes(6)
    # Cut from the corpus at that many tokens; the text re-encodes to as many or a few fewer
    # (a cut can split a merge), as any corpus prompt's does.
    lengths = [len(tokenizer.encode(pc.prompt)) for pc in planned]
    assert all(p - 3 <= n <= p for n, (p, _) in zip(lengths, shapes)), (lengths, shapes)
    assert [pc.request["max_new_tokens"] for pc in planned] == [o for _, o in shapes]
    assert [pc.at_s for pc in planned] == scenario.groups[0].arrival.times(6, None)


@pytest.mark.parametrize("arrival,expected", [
    ("{kind: trace, trace: nowhere}", "groups.0.arrival.trace: nowhere: cannot read"),
    ("{kind: trace, trace: azure_code, prompt_column: Prompt}", "no column 'Prompt'"),
    ("{kind: trace, trace: azure_code, start_s: 299}", "fewer than the group's count 5"),
])
def test_a_trace_that_cannot_be_read_is_refused_at_load_naming_the_field(tmp_path, arrival, expected):
    with pytest.raises(ScenarioError) as err:
        load(write(tmp_path, "bad", 5, arrival))
    assert "bad.yaml:7: groups.0.arrival" in str(err.value) and expected in str(err.value)
