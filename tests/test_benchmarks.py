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


def test_a_ratio_is_taken_within_each_round_then_spread_over_the_rounds():
    from benchmarks.peer import ratios

    def row(n, r, tps, ttft=1.0, gap=0.01):
        return {"n": n, "round": r, "tokens_per_s": tps, "ttft_p50_s": ttft, "gap_p50_s": gap}
    ours = [row(1, 0, 30.0), row(1, 1, 15.0), row(32, 0, 300.0, 2.0), row(32, 1, 200.0, 1.0)]
    theirs = [row(1, 0, 60.0), row(1, 1, 10.0), row(32, 0, 250.0, 4.0), row(32, 1, 100.0, 2.0)]
    r = ratios(ours, theirs)
    # within a round: 0.5 and 1.5 at one stream (across rounds it would have read 45/70)
    assert r["1"]["tokens_per_s"] == spread([0.5, 1.5])
    assert r["32"]["tokens_per_s"]["max"] == 2.0 and r["32"]["ttft_p50_s"] == spread([0.5, 0.5])


def test_each_peers_threads_are_read_back_from_what_it_logs():
    from benchmarks.peer import threads_read_back

    assert threads_read_back("llamacpp", "system_info: n_threads = 1 (n_threads_batch = 1) / 2 | CPU") == 1
    assert threads_read_back("vllm", "\tlocal_rank=0, core ids=[0, 1]\n\treserved_cpus=[]") == 2
    assert threads_read_back("transformers-serve", "anything") is None
    assert threads_read_back("llamacpp", "no such line") is None


def test_every_server_gets_the_same_threads_by_one_rule(monkeypatch):
    """Ours by OMP_NUM_THREADS, llama-server by -t, vLLM by its bound cores: the same number."""
    from harness.format.target import TARGETS
    from harness.live.process import TargetProcess
    from harness.machine.cores import server_threads, thread_fill

    monkeypatch.setenv("STREAMLAB_SERVER_THREADS", "2")
    assert thread_fill() == {"threads": "2", "cores": "0-1"} and thread_fill(1)["cores"] == "0"
    fill = {"model_gguf": "m.gguf", "max_batch": "4", "context": "64"}
    llama = TargetProcess("llamacpp", TARGETS["llamacpp"].command, {**fill, "llama_server": "ls"}, None)
    args = llama.command([])
    assert args[args.index("-t") + 1] == str(server_threads()) == llama.env["OMP_NUM_THREADS"] == "2"
    vllm = TargetProcess("vllm", TARGETS["vllm"].command, {**fill, "vllm": "v", "model_dir": "d", "positions": "256", "port": "1"}, None, env=TARGETS["vllm"].env)
    assert vllm.env["VLLM_CPU_OMP_THREADS_BIND"] == "0-1"
    braces = TargetProcess("x", ["x"], fill, None, env={"JSON": '{"a": 1} {threads}'})
    assert braces.env["JSON"] == '{"a": 1} 2'  # only the fill's names are filled


def test_the_peer_section_states_threads_goals_and_what_did_not_run():
    from benchmarks.peer_section import HEADING, peer_section

    lv = lambda n, tps: {"n": n, "repetitions": 2, "tokens_per_s": spread([tps]), "ttft_p50_s": spread([0.5]),
                         "gap_p50_s": spread([0.02]), "gap_p99_s": spread([0.05]), "makespan_s": spread([2.0])}
    ratio = {k: spread([1.3]) for k in ("tokens_per_s", "ttft_p50_s", "gap_p50_s")}
    p = {"threads": 1, "levels": [1, 32], "rounds": 2, "missing": {"vllm": "not installed"},
         "ours": {"start_s": 1.0, "threads_read": 1, "routes": {"streamlab-openai": {"levels": [lv(1, 30), lv(32, 300)]}}},
         "peers": {"llamacpp": {"start_s": 2.0, "version": "b1", "command": "llama-server -t {threads}",
                                "threads_read": 1, "same_as_ours": 32, "streams_compared": 32, "compared_by": "text",
                                "routes": {"llamacpp": {"levels": [lv(1, 40), lv(32, 250)]}}}},
         "ratios": {"llamacpp": {"1": ratio, "32": ratio}}, "back_to_back": {"total_s": 40.0},
         "bound": {"threads": 1, "tokens_per_s": spread([320.0]), "batch_1_step_s": spread([0.025])}}
    text = peer_section(p)
    assert text.startswith(HEADING) and "**1 compute thread(s)**" in text
    assert "tokens/s 1.30x (goal ≥ 1.2x)" in text and "one stream: tokens/s 1.30x" in text
    assert "over our engine in-process on the same 1 thread(s): 0.94x" in text
    assert "back to back / 32 at once: 20.0x" in text and "vLLM (CPU) did not run: not installed" in text
    assert peer_section(None) == "" and peer_section({"threads": 1}) == ""


def test_the_peer_run_gives_every_server_the_serving_threads_and_puts_the_rule_back(monkeypatch):
    from benchmarks.peer import serving_threads, threads_for_every_server
    from harness.machine.cores import server_threads, thread_fill

    monkeypatch.delenv("STREAMLAB_SERVER_THREADS", raising=False)
    monkeypatch.setenv("STREAMLAB_BENCH_THREADS", "3")
    assert serving_threads() == 3
    before = server_threads()
    with threads_for_every_server(3):
        assert server_threads() == 3 and thread_fill()["cores"] == "0-2"
    assert server_threads() == before
