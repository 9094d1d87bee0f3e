"""The benchmark client's parsing and the results page's arithmetic (the runs themselves are
`scripts/dev bench`, not tests)."""

import json

import pytest

from benchmarks.common import spread
from harness.record.trace import percentile
from benchmarks.overlap import by_level, summarize_burst
from benchmarks.streams import STREAMLAB, TimedStream, peer_api
from harness.record.trace import StreamRecord
from streamlab.sse import SSEEvent

# Times nothing (read for it): may run beside another such item under xdist (harness/cores_lock.py).
pytestmark = pytest.mark.shares_cores


def _event(data, event: str = "message") -> SSEEvent:
    return SSEEvent(event, data if isinstance(data, str) else json.dumps(data), "", None)


def _record() -> StreamRecord:
    return StreamRecord("bench", 0, "fast", "hi", {})


def test_a_peer_is_asked_and_read_through_its_targets_wire():
    """transformers serve: its profile's generation_config in the body; one token per chunk, the finish not one."""
    api, rec = peer_api("transformers-serve", "/m"), _record()
    for i, text in enumerate(["Hel", "", "lo"]):
        api.take(_event({"choices": [{"index": 0, "text": text}]}), rec, 10.5 + i)
    api.take(_event({"choices": [{"index": 0, "text": "", "finish_reason": "length"}],
                     "usage": {"completion_tokens": 3}}), rec, 13.0)
    api.take(_event("[DONE]"), rec, 13.1)
    assert rec.text == "Hello" and len(rec.token_times) == 3 and rec.finish == "length"
    body = api.body("hi", 64)
    assert body["temperature"] == 0 and body["max_tokens"] == 64 and body["model"] == "/m"
    assert json.loads(body["generation_config"])["eos_token_id"] == -1 and "ignore_eos" not in body
    vllm = peer_api("vllm", "m").body("hi", 8)
    assert vllm["ignore_eos"] is True and vllm["return_token_ids"] is True
    assert peer_api("llamacpp", "m").body("hi", 8)["ignore_eos"] is True


def test_our_events_keep_token_ids_and_an_error_event_raises():
    rec = _record()
    STREAMLAB.take(_event({"index": 0, "token_id": 7, "text": "a"}, "token"), rec, 0.2)
    STREAMLAB.take(_event({"finish_reason": "length", "usage": {"completion_tokens": 1}}, "done"), rec, 0.3)
    assert rec.token_ids == [7] and rec.finish == "length"
    try:
        STREAMLAB.take(_event({"error": {"type": "slow_client"}}, "error"), _record(), 0.4)
    except RuntimeError as exc:
        assert "slow_client" in str(exc)
    else:
        raise AssertionError("an error event must fail the benchmark stream")


def test_the_page_reads_one_peer_from_before_and_several_now():
    from benchmarks.page import peers

    old = {"levels": [], "same_text_as_ours": 32, "streams_compared": 32, "command": "transformers serve"}
    assert peers({"peer": old})["transformers-serve"]["same_as_ours"] == 32
    assert peers({"peer": {"peers": {"vllm": {"levels": []}}, "missing": {}}}) == {"vllm": {"levels": []}}
    assert peers({}) == {}


def test_burst_summary_and_levels_use_medians_and_count_identity():
    def stream(i, ids, t0=0.0):
        s = TimedStream(i, t0)
        s.token_times = [t0 + 0.1 * (k + 1) for k in range(len(ids))]
        s.token_ids = ids
        return s
    solo = {0: stream(0, [1, 2]), 1: stream(1, [3, 4])}
    row = summarize_burst(2, 1.0, [stream(0, [1, 2]), stream(1, [3, 5])], solo)
    assert row["identical"] == 1 and row["tokens_per_s"] == 128 and abs(row["ttft_p50_s"] - 0.1) < 1e-9
    levels = by_level([row, {**row, "makespan_s": 3.0}, {**row, "makespan_s": 2.0}])
    assert levels[0]["makespan_s"] == spread([1.0, 3.0, 2.0]) and levels[0]["streams"] == 6
    assert percentile([1, 2, 3, 4], 50) == 2 and percentile([1, 2, 3, 4], 99) == 4
