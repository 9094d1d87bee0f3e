"""A shortened soak: 2,000 mixed streams (readers, droppers with FIN or RST, slow readers, bad
requests, reconnectors) against one real server with a small history, and everything the
server holds sampled throughout: every per-stream collection stays within its bound, and memory,
descriptors and the event loop's tasks are flat after warm-up. (The full soak, 20,000 streams,
is `scripts/dev bench --only soak`.)"""

import asyncio

from benchmarks.soak import soak, summary

STREAMS, HISTORY, CONCURRENCY = 2000, 300, 32


def test_a_long_run_holds_bounded_state():
    result = asyncio.run(soak(STREAMS, HISTORY, CONCURRENCY, sample_s=0.5, say=lambda *_: None))
    s = summary(result)
    tally = result["tally"]
    # resume_410: a reconnector that came back after the window of a stream that had completed
    # (its last events replayable for the window after it ended), or after reading its end.
    odd = [k for k in tally if k.startswith(("client_error", "resume_", "refused_")) and k != "resume_410"]
    assert sum(tally.values()) == STREAMS and not odd, tally
    assert tally.get("bad_400", 0) > 0 and tally.get("reconnector", 0) > 0 and tally.get("dropper", 0) > 0, tally
    for key in ("ledger_entries", "releases", "release_delays", "closed_streams", "ended_remembered", "step_log"):
        assert s[key]["max"] <= HISTORY + CONCURRENCY, (key, s[key])  # bounded by the history, not the run
    # Live streams: the clients' own, plus those whose client left and that wait --resume-window
    # (5 s) for a reconnect: bounded by the rate of leaving, not by how long the server has run.
    for key in ("streams", "engine_live", "scheduler_waiting", "scheduler_running", "block_tables"):
        assert s[key]["max"] <= 8 * CONCURRENCY, (key, s[key])
        assert s[key]["end"] == 0, (key, s[key])
    assert s["ledger_forgotten"]["end"] >= STREAMS - HISTORY - tally.get("bad_400", 0) - CONCURRENCY
    assert s["loop_tasks"]["max"] <= 4 * CONCURRENCY + 20, s["loop_tasks"]  # ~3 per open response
    assert s["loop_tasks"]["end"] <= 10, s["loop_tasks"]
    assert s["open_fds"]["end"] <= s["open_fds"]["start"] + 10, s["open_fds"]
    assert s["rss_bytes"]["end"] <= s["rss_bytes"]["start"] + 64 * 2**20, s["rss_bytes"]  # 64 MB: allocator noise
    stats = result["stats"]
    assert stats["blocks_free"] == stats["blocks_total"] and stats["double_release_attempts"] == 0
    assert result["ledger_problems_when_idle"] == []
