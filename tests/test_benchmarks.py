"""The benchmark client's parsing and the results page's arithmetic (the runs themselves are
`scripts/dev bench`, not tests)."""

import json

from benchmarks.common import spread
from harness.trace import percentile
from benchmarks.overlap import by_level, summarize_burst
from benchmarks.streams import STREAMLAB, TimedStream, peer_api


def test_peer_events_count_one_token_each_and_the_finish_is_not_a_token():
    api = peer_api("/m")
    s = TimedStream(0, sent_at=10.0)
    for i, text in enumerate(["Hel", "", "lo"]):
        api.take(json.dumps({"choices": [{"index": 0, "text": text}]}), None, s, 10.5 + i)
    api.take(json.dumps({"choices": [{"index": 0, "text": "", "finish_reason": "length"}],
                         "usage": {"completion_tokens": 3}}), None, s, 13.0)
    api.take("[DONE]", None, s, 13.1)
    assert s.text == "Hello" and len(s.token_times) == 3 and s.finish_reason == "length"
    assert s.completion_tokens == 3 and s.ttft_s == 0.5 and s.gaps_s == [1.0, 1.0]
    body = api.body("hi", 64)
    assert body["temperature"] == 0 and json.loads(body["generation_config"])["eos_token_id"] == -1


def test_our_events_keep_token_ids_and_an_error_event_raises():
    s = TimedStream(0, sent_at=0.0)
    STREAMLAB.take(json.dumps({"index": 0, "token_id": 7, "text": "a"}), "token", s, 0.2)
    STREAMLAB.take(json.dumps({"finish_reason": "length", "usage": {"completion_tokens": 1}}), "done", s, 0.3)
    assert s.token_ids == [7] and s.finish_reason == "length"
    try:
        STREAMLAB.take(json.dumps({"error": {"type": "slow_client"}}), "error", s, 0.4)
    except RuntimeError as exc:
        assert "slow_client" in str(exc)
    else:
        raise AssertionError("an error event must fail the benchmark stream")


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
