"""The Starlette app called directly (no sockets): events, refusals, policies, disconnects, shutdown."""

from __future__ import annotations

import asyncio
import time

import pytest

from streamlab.config import CacheConfig, EngineConfig, ServiceConfig
from streamlab.engine.outputs import FinishEvent, StepOutput, TokenEvent
from streamlab.engine.sequence import FinishReason
from streamlab.policies import BackpressureConfig, Policy
from tests.asgi import assert_clean, running_service

pytestmark = pytest.mark.asyncio

PROMPT = "Return the number of items in the container."


def cfg(**kw) -> ServiceConfig:
    engine = kw.pop("engine", EngineConfig(max_batch=8, cache=CacheConfig(num_blocks=256)))
    kw.setdefault("debug", True)  # these tests read /debug/* and /metrics
    return ServiceConfig(engine=engine, **kw)


async def test_stream_events_in_order_with_ids_and_request_id(tiny):
    async with running_service(cfg(), tiny) as svc:
        r = await svc.call("/v1/stream", {"prompt": PROMPT, "max_new_tokens": 12, "ignore_eos": True})
        assert r.status == 200 and r.headers["content-type"].startswith("text/event-stream")
        kinds = [e.event for e in r.events]
        assert kinds == ["start"] + ["token"] * 12 + ["done"]
        assert [e.id for e in r.events] == [f"{r.headers['x-request-id']}:{i}" for i in range(1, 15)]
        assert all(e.json()["type"] == e.event for e in r.events)
        start = r.events[0].json()
        assert start["id"] == r.headers["x-request-id"] and start["prompt_tokens"] == len(tiny.tokenizer.encode(PROMPT))
        assert [t["index"] for t in r.tokens] == list(range(12))
        assert r.last == {"type": "done", "finish_reason": "length",
                          "usage": {"prompt_tokens": start["prompt_tokens"], "completion_tokens": 12}}
        whole = (await svc.call("/v1/generate", {"prompt": PROMPT, "max_new_tokens": 12, "ignore_eos": True})).json()
        assert whole["token_ids"] == [t["token_id"] for t in r.tokens]
        assert whole["text"] == "".join(t["text"] for t in r.tokens) == tiny.tokenizer.decode(whole["token_ids"])
        assert whole["usage"] == r.last["usage"] and whole["finish_reason"] == "length"
        assert_clean(await svc.settle())


REFUSALS = [
    ({"prompt": "x"}, {"content-type": "text/plain"}, 415, "unsupported_media_type"),
    (b"{not json", None, 400, "invalid_json"),
    (b"[1, 2]", None, 422, "invalid_request"),
    ({"prompt": "x", "max_new_tokens": "5"}, None, 422, "invalid_request"),
    ({"prompt": "x", "max_new_tokens": 0}, None, 422, "invalid_request"),
    ({"prompt": "x", "temperature": -1}, None, 422, "invalid_request"),
    ({"prompt": "x", "surprise": 1}, None, 422, "invalid_request"),
    ({"prompt": ""}, None, 422, "invalid_request"),
    ({"prompt": "x", "stop": [""]}, None, 422, "invalid_request"),
    ({"max_new_tokens": 3}, None, 422, "invalid_request"),
    ({"prompt": "x", "max_new_tokens": 2000}, None, 422, "request_too_large"),
    ({"prompt": "x" * 70_000}, None, 413, "body_too_large"),
    ({"prompt": "x", "pad_bytes": 1024}, None, 403, "not_allowed"),
    ({"prompt": "x", "response_class": "write_only"}, None, 403, "not_allowed"),
]


@pytest.mark.parametrize("path", ["/v1/stream", "/v1/generate"])
async def test_refusals_come_before_the_first_byte_as_json(tiny, path):
    async with running_service(cfg(), tiny) as svc:
        for body, headers, status, kind in REFUSALS:
            r = await svc.call(path, body, headers=headers)
            assert (r.status, r.json()["error"]["type"]) == (status, kind), (body, r.body)
            assert r.json()["type"] == "error" and r.json()["error"]["message"]
            assert r.headers["content-type"] == "application/json"
        stats = await svc.settle()
        assert stats["requests_refused"] == len(REFUSALS) and stats["requests_accepted"] == 0
        assert_clean(stats)


async def test_cache_too_small_for_a_request_is_422(tiny):
    small = cfg(engine=EngineConfig(max_batch=2, cache=CacheConfig(num_blocks=2, block_size=4)))
    async with running_service(small, tiny) as svc:
        r = await svc.call("/v1/stream", {"prompt": PROMPT, "max_new_tokens": 20})
        assert r.status == 422 and r.json()["error"]["type"] == "request_too_large"


async def test_unknown_routes_and_methods_are_json(tiny):
    async with running_service(cfg(), tiny) as svc:
        assert (await svc.get("/nope")).json()["error"]["type"] == "not_found"
        r = await svc.call("/v1/stream", method="PUT")  # GET is EventSource's way in (the page)
        assert r.status == 405 and r.json()["error"]["type"] == "method_not_allowed"
        r = await svc.get("/v1/stream")  # a GET without a prompt is refused like a POST without one
        assert r.status == 422 and r.json()["error"]["type"] == "invalid_request"


async def test_waiting_limit_gives_429_with_retry_after(tiny):
    one_slot = cfg(engine=EngineConfig(max_batch=1, cache=CacheConfig(num_blocks=256)), waiting_limit=1)
    async with running_service(one_slot, tiny) as svc:
        gone = asyncio.Event()
        running = asyncio.ensure_future(svc.call("/v1/stream", {"prompt": PROMPT, "max_new_tokens": 500,
                                                                "ignore_eos": True}, disconnect=gone))
        await svc.until(lambda s: s["running"] == 1)
        waiting = asyncio.ensure_future(svc.call("/v1/stream", {"prompt": PROMPT, "max_new_tokens": 4},
                                                 disconnect=gone))
        await svc.until(lambda s: s["waiting"] == 1)
        refused = await svc.call("/v1/stream", {"prompt": PROMPT, "max_new_tokens": 4})
        assert refused.status == 429 and refused.headers["retry-after"] == "1"
        assert refused.json()["error"]["type"] == "overloaded"
        gone.set()
        await asyncio.gather(running, waiting)
        assert_clean(await svc.settle())


async def test_close_is_idempotent_and_late_events_are_dropped_and_counted(tiny):
    async with running_service(cfg(), tiny) as svc:
        hub = svc.hub
        stream = hub.open(tiny.tokenizer.encode(PROMPT), __import__("streamlab.sampling").sampling.SamplingParams(
            max_new_tokens=50, ignore_eos=True), [])
        hub.close(stream, "client_gone")
        hub.close(stream, "client_gone")
        assert hub.books.cancellations["client_gone"] == 1 and hub.books.counters["streams_closed"] == 1
        late = StepOutput(999, [TokenEvent(stream.request_id, 0, 5)],
                          [FinishEvent(stream.request_id, FinishReason.CANCELLED, 1, 999)], 0, 1)
        before = hub.books.counters["late_events_dropped"]
        hub._deliver(late, time.monotonic())
        assert hub.books.counters["late_events_dropped"] == before + 2
        assert_clean(await svc.settle())


async def test_stop_string_ends_the_stream_before_it(tiny):
    async with running_service(cfg(), tiny) as svc:
        solo = (await svc.call("/v1/generate", {"prompt": PROMPT, "max_new_tokens": 40, "ignore_eos": True})).json()
        text = solo["text"]
        stop = text[len(text) // 2: len(text) // 2 + 3]
        cut = text.find(stop)
        r = await svc.call("/v1/stream", {"prompt": PROMPT, "max_new_tokens": 40, "ignore_eos": True,
                                          "stop": [stop, "\x00never"]})
        assert r.last["finish_reason"] == "stop"
        assert "".join(t["text"] for t in r.tokens) == text[:cut]
        n = r.last["usage"]["completion_tokens"]
        assert n < 40 and [t["token_id"] for t in r.tokens] == solo["token_ids"][:n]
        assert svc.hub.stats()["tokens_generated"] == 40 + n  # no token made after the stop
        assert_clean(await svc.settle())


async def test_concurrent_streams_equal_solo_runs(tiny):
    from streamlab.prompts import shipped_prompts
    prompts = list(shipped_prompts()[:8])
    async with running_service(cfg(), tiny) as svc:
        solo = [(await svc.call("/v1/generate", {"prompt": p, "max_new_tokens": 32, "ignore_eos": True})).json()
                for p in prompts]
        together = await asyncio.gather(*(svc.call("/v1/stream", {"prompt": p, "max_new_tokens": 32,
                                                                  "ignore_eos": True}) for p in prompts))
        for s, t in zip(solo, together):
            assert [x["token_id"] for x in t.tokens] == s["token_ids"]
            assert "".join(x["text"] for x in t.tokens) == s["text"]
        assert_clean(await svc.settle())


async def test_shutdown_ends_running_streams_and_refuses_new_ones(tiny):
    async with running_service(cfg(graceful_timeout_s=0.1), tiny) as svc:
        started = asyncio.Event()

        async def note(reply, event):
            started.set()

        long = asyncio.ensure_future(svc.call("/v1/stream", {"prompt": PROMPT, "max_new_tokens": 900,
                                                             "ignore_eos": True}, on_event=note))
        await asyncio.wait_for(started.wait(), 10)
        svc.hub.begin_shutdown(0.1)
        refused = await svc.call("/v1/stream", {"prompt": PROMPT})
        assert refused.status == 503 and refused.json()["error"]["type"] == "shutting_down"
        reply = await long
        assert reply.last["type"] == "error" and reply.last["error"]["type"] == "shutting_down"
        assert_clean(await svc.settle())


async def test_debug_and_metrics_endpoints(tiny):
    async with running_service(cfg(), tiny) as svc:
        await svc.call("/v1/stream", {"prompt": PROMPT, "max_new_tokens": 3})
        gone = asyncio.Event()
        gone.set()
        await svc.call("/v1/stream", {"prompt": PROMPT, "max_new_tokens": 300, "ignore_eos": True}, disconnect=gone)
        await svc.settle()
        assert (await svc.get("/debug/invariants")).json() == {"violations": []}
        assert (await svc.get("/healthz")).json()["status"] == "ok"
        metrics = (await svc.get("/metrics")).body.decode()
        for name in ("streamlab_blocks_allocated_total", "streamlab_blocks_released_total",
                     'streamlab_cancellations_total{reason="client_gone"} 1.0',
                     "streamlab_release_delay_seconds_count 1.0"):
            assert name in metrics, name
        releases = (await svc.get("/debug/releases")).json()
        assert releases["ledger_problems_when_idle"] == [] and len(releases["releases"]) == 2


# ---- policies: one slow reader among eight ----

SLOW_S = 0.15
TOKENS = 16


async def run_slow_reader_mix(tiny, policy: str, slow: int = 1, slow_tokens: int = TOKENS):
    config = cfg(backpressure=BackpressureConfig(Policy(policy), queue_limit=4, stall_timeout_s=0.25))
    async with running_service(config, tiny) as svc:
        max_paused = 0
        reserved_while_paused = []

        async def slow_reader(reply, event):
            nonlocal max_paused
            stats = svc.hub.stats()
            if stats["paused"]:
                reserved_while_paused.append(stats["blocks_reserved"])
            max_paused = max(max_paused, stats["paused"])
            if svc.hub.books.cancellations["slow_client"]:
                # Dropped: the rest is the backlog queued before the drop (about 370 events under
                # `drop`), read at the client's pace it took 50 s and checked nothing more.
                return
            await asyncio.sleep(SLOW_S)  # each write takes this long: a reader that cannot keep up

        body = {"prompt": PROMPT, "max_new_tokens": TOKENS, "ignore_eos": True}
        slow_body = {**body, "max_new_tokens": slow_tokens}
        t0 = asyncio.get_running_loop().time()
        calls = [svc.call("/v1/stream", slow_body, on_event=slow_reader) for _ in range(slow)]
        calls += [svc.call("/v1/stream", body) for _ in range(8 - slow)]
        replies = await asyncio.gather(*calls)
        healthy_done = max(r.event_times[-1] for r in replies[slow:]) - t0
        stats = await svc.settle()
        assert_clean(stats)
        return replies[:slow], replies[slow:], healthy_done, max_paused, reserved_while_paused, svc.hub


@pytest.mark.parametrize("policy", ["drop", "pause_then_drop"])
async def test_only_the_client_is_blamed_for_a_stall(tiny, policy, monkeypatch):
    """A stream far past the queue limit whose writer never got the event loop (nobody iterates
    its events: the server's own lag) is not dropped, however long that lasts; once a connection
    holds a write its client does not take, the stall timeout drops it."""
    from streamlab.engine.engine import BatchEngine
    from streamlab.sampling import SamplingParams

    step = BatchEngine.step

    def slow_step(self, on_prefill=None):
        time.sleep(0.002)  # so that no machine finishes the 1000 steps (>= 2 s) before the drop (~0.25 s in)
        return step(self, on_prefill)
    monkeypatch.setattr(BatchEngine, "step", slow_step)
    config = cfg(backpressure=BackpressureConfig(Policy(policy), queue_limit=4, stall_timeout_s=0.05))
    async with running_service(config, tiny) as svc:
        hub = svc.hub
        # Under `drop` the sequence runs on at the limit: it must outlast both waits below.
        stream = hub.open(tiny.tokenizer.encode(PROMPT), SamplingParams(max_new_tokens=1000, ignore_eos=True), [])
        await svc.until(lambda _: len(stream.queue) >= 4, deadline_s=2.0)
        await asyncio.sleep(0.15)  # 3x the stall timeout, at the limit, the stall ticker running
        assert len(stream.queue) >= 4 and not stream.finished, hub.books.cancellations
        events = hub.events(stream, keepalive_s=60)
        await events.__anext__()  # handed to a connection whose client never takes it
        await svc.until(lambda _: stream.finished, deadline_s=1.0)
        assert stream.queue[-1].kind == "error", stream.queue[-1]
        assert stream.queue[-1].payload["error"]["type"] == "slow_client"
        assert hub.books.cancellations["slow_client"] == 1
        await events.aclose()
        hub.close(stream, "client_gone")
        assert_clean(await svc.settle())


async def test_a_paused_stream_whose_connection_is_lost_is_not_resumed_before_its_close(tiny):
    """uvicorn's send() returns silently once the connection is lost, before the response's
    listener hears of it: a body loop that went on taking events drained the queue and resumed
    the paused sequence, which its close then cancelled running (slow_reader_pause_leave live
    reached 'cancelled while paused' in half its runs). Asked first, nothing is taken."""
    from streamlab.sampling import SamplingParams

    config = cfg(backpressure=BackpressureConfig(Policy("pause"), queue_limit=4, stall_timeout_s=0.02))
    async with running_service(config, tiny) as svc:
        hub = svc.hub
        stream = hub.open(tiny.tokenizer.encode(PROMPT), SamplingParams(max_new_tokens=1000, ignore_eos=True), [])
        await svc.until(lambda _: stream.paused, deadline_s=2.0)
        queued = len(stream.queue)
        stream.connection_lost = lambda: True
        assert [e async for e in hub.events(stream, keepalive_s=60)] == []
        assert stream.paused and len(stream.queue) == queued
        hub.close(stream, "client_gone")
        await svc.until(lambda _: hub.stats()["cancelled_while"]["paused"] == 1, deadline_s=2.0)
        assert_clean(await svc.settle())


async def test_naive_policy_stalls_the_healthy_streams(tiny):
    """The negative control: the step loop waits for the slow reader, so everyone does."""
    slow, healthy, healthy_done, *_ = await run_slow_reader_mix(tiny, "naive")
    assert healthy_done > 0.5 * TOKENS * SLOW_S  # about one slow write per step
    assert all(r.last["finish_reason"] == "length" for r in slow + healthy)


@pytest.mark.parametrize("policy", ["unbounded", "pause", "drop", "pause_then_drop"])
async def test_other_policies_do_not_stall_the_healthy_streams(tiny, policy):
    # A dropping policy can only drop a sequence still running after the stall timeout: on the
    # tiny model that takes a long one. The others must deliver everything, so theirs is short.
    slow_tokens = 1000 if "drop" in policy else TOKENS
    slow, healthy, healthy_done, max_paused, reserved_while_paused, hub = await run_slow_reader_mix(
        tiny, policy, slow_tokens=slow_tokens)
    assert healthy_done < 0.25 * TOKENS * SLOW_S, f"healthy streams took {healthy_done:.2f}s under {policy}"
    assert all(r.last["finish_reason"] == "length" for r in healthy)
    last = slow[0].last
    if policy in ("drop", "pause_then_drop"):
        assert last["type"] == "error" and last["error"]["type"] == "slow_client"
        assert hub.books.cancellations["slow_client"] == 1 and len(slow[0].tokens) < slow_tokens
    else:
        assert last["finish_reason"] == "length" and len(slow[0].tokens) == TOKENS
    if policy in ("pause", "pause_then_drop"):
        assert max_paused == 1
        assert reserved_while_paused and min(reserved_while_paused) > 0  # pause keeps the blocks
    else:
        assert max_paused == 0
