"""The wire contract checks (harness/judge/wire_checks.py): each on records made to pass it and
made to fail it, and each seeded wire defect caught by its named check in the library's
stop_strings scenario, in simulation and live."""

from __future__ import annotations

import pytest

from harness.format.load import load_by_name
from harness.judge.wire_checks import event_order, finish_agrees, text, usage
from harness.record.trace import StreamRecord
from harness.run import runner
from streamlab.tokenizer import shipped_tokenizer
from tests.helpers import client_trace, skip_unless_live

SCENARIO = "stop_strings"
TOK = shipped_tokenizer()
WORDS = "the cat sat on the mat and then it ran"


def record(text_read: str | None = None, finish: str | None = "length", stop: list[str] | None = None,
           words: str = WORDS, **kw) -> StreamRecord:
    ids = TOK.encode(words)
    prompt = "a prompt"
    rec = StreamRecord("stoppers", 0, "reader", prompt, {"max_new_tokens": len(ids), "stop": stop or []},
                       status=200, token_times=[0.1 * (i + 1) for i in range(len(ids))], token_ids=ids,
                       text=words if text_read is None else text_read, finish=finish,
                       token_indices=list(range(len(ids))),
                       usage={"prompt_tokens": len(TOK.encode(prompt)), "completion_tokens": len(ids)})
    for k, v in kw.items():
        setattr(rec, k, v)
    return rec


def judged(check, *records: StreamRecord):
    return check(load_by_name(SCENARIO), client_trace(SCENARIO, "sim", list(records)))


@pytest.mark.shares_cores
def test_text_is_the_tokens_decoded_cut_at_the_first_stop_string():
    assert judged(text, record()).passed
    assert not judged(text, record(WORDS.replace("cat ", ""))).passed  # a delta dropped
    cut = WORDS[:WORDS.index(" on")]
    assert judged(text, record(cut, finish="stop", stop=[" on", "mat"])).passed
    assert not judged(text, record(cut + " on", finish="stop", stop=[" on"])).passed  # the stop string sent
    # a client that left early read a prefix, short by at most a held-back stop prefix
    early = record("the cat", finish=None, stop=["zzzz"], words="the cat s")  # " s" held back
    assert judged(text, early).passed
    assert not judged(text, record(WORDS[:5] + "X", finish=None)).passed


@pytest.mark.shares_cores
def test_usage_counts_what_was_read():
    assert judged(usage, record()).passed
    short = record()
    short.usage = {**short.usage, "completion_tokens": short.usage["completion_tokens"] - 1}
    assert not judged(usage, short).passed
    prompt = record()
    prompt.usage = {**prompt.usage, "prompt_tokens": 99}
    assert not judged(usage, prompt).passed
    assert judged(usage, record(finish=None, usage=None)).compared == 0  # a client that left: no usage to count


@pytest.mark.shares_cores
def test_events_come_in_order_and_nothing_after_the_end():
    assert judged(event_order, record()).passed
    skipped = record()
    skipped.token_indices = [0, 1, 2, 4] + list(range(5, len(skipped.token_ids) + 1))
    check = judged(event_order, skipped)
    assert not check.passed and "token event 3 carries index 4" in check.details[0]
    assert not judged(event_order, record(after_end=1)).passed


@pytest.mark.shares_cores
def test_a_finish_reason_agrees_with_what_was_read():
    assert judged(finish_agrees, record()).passed
    assert not judged(finish_agrees, record(token_ids=TOK.encode(WORDS)[:-1])).passed  # length, one short
    assert not judged(finish_agrees, record(stop=[" on"])).passed  # the stop string read, ended with length
    assert not judged(finish_agrees, record(finish="stop", stop=["zzz"])).passed  # stop with no stop string
    ids = TOK.encode(WORDS)
    late = record(finish="stop", stop=[" cat"], token_ids=ids)  # " cat" complete long before the end
    assert not judged(finish_agrees, late).passed
    assert not judged(finish_agrees, record(finish="eos")).passed  # its last token is not end of text


# ---- each seeded wire defect, caught in the library by its check ----

CAUGHT_BY = {"dropped_text_delta": "text", "usage_off_by_one": "usage", "stop_tail_after_stop": "text",
             "skipped_event_index": "event_order"}
WIRE = ("text", "usage", "event_order", "finish_agrees")


def wire_verdicts(mode: str, defect: str = "") -> dict[str, bool | None]:
    outcome = runner.run_scenario(load_by_name(SCENARIO), mode, runner.RunContext(results_dir=None,
                                                                                   lab_defect=defect))
    return {c.name: c.passed for c in outcome.checks if c.name in WIRE}


def _caught(mode: str) -> None:
    assert wire_verdicts(mode) == dict.fromkeys(WIRE, True)
    for defect, check in CAUGHT_BY.items():
        got = wire_verdicts(mode, defect)
        assert got == {**dict.fromkeys(WIRE, True), check: False}, (defect, got)


@pytest.mark.shares_cores  # a simulation: every figure on its virtual clock
def test_each_wire_defect_is_caught_by_its_check_in_simulation():
    _caught("sim")


def test_each_wire_defect_is_caught_by_its_check_live():
    skip_unless_live(SCENARIO)
    _caught("live")
