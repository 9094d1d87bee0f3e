"""The responses that wait on a hub stream (streamlab/responses.py), called through the app with
no sockets: every way a response ends closes its stream once, Starlette's own disconnect
listening included, and the write-only lab response is the one that never learns."""

from __future__ import annotations

import asyncio

import pytest

from streamlab.config import CacheConfig, EngineConfig, ServiceConfig
from tests.asgi import assert_clean, running_service

pytestmark = pytest.mark.asyncio

PROMPT = "Return the number of items in the container."


def cfg(**kw) -> ServiceConfig:
    engine = kw.pop("engine", EngineConfig(max_batch=8, cache=CacheConfig(num_blocks=256)))
    kw.setdefault("debug", True)
    return ServiceConfig(engine=engine, **kw)


# ---- the SSE response (HubStreamingResponse) ----

async def test_client_leaving_before_the_first_event_is_released(tiny):
    async with running_service(cfg(), tiny) as svc:
        gone = asyncio.Event()
        gone.set()  # the disconnect is already waiting when the response starts
        await svc.call("/v1/stream", {"prompt": PROMPT, "max_new_tokens": 200, "ignore_eos": True}, disconnect=gone)
        stats = await svc.settle()
        assert_clean(stats)
        assert stats["cancellations"]["client_gone"] == 1
        assert stats["tokens_generated"] < 200


async def test_client_leaving_while_the_body_is_paused_at_yield_is_released(tiny):
    async with running_service(cfg(), tiny) as svc:
        gone = asyncio.Event()
        blocked = asyncio.Event()

        async def leave_after_first_token(reply, event):
            if event.event == "token":
                gone.set()  # the client goes while this write is still in progress
                await blocked.wait()  # the write never completes: the body generator is parked at yield

        await svc.call("/v1/stream", {"prompt": PROMPT, "max_new_tokens": 200, "ignore_eos": True},
                       disconnect=gone, on_event=leave_after_first_token)
        stats = await svc.settle()
        assert_clean(stats)
        assert stats["cancellations"]["client_gone"] == 1 and stats["releases"] == 1
        record = svc.hub.books.releases[-1]
        assert record.reason == "cancelled" and record.release_step <= record.closed_after_step + 1


async def test_keepalive_comment_while_waiting_for_a_slot(tiny):
    one_slot = cfg(engine=EngineConfig(max_batch=1, cache=CacheConfig(num_blocks=256)), keepalive_s=0.05)
    async with running_service(one_slot, tiny) as svc:
        first = asyncio.ensure_future(svc.call("/v1/stream", {"prompt": PROMPT, "max_new_tokens": 300,
                                                              "ignore_eos": True}))
        await svc.until(lambda s: s["running"] == 1)
        second = await svc.call("/v1/stream", {"prompt": PROMPT, "max_new_tokens": 2})
        await first
        assert b": keep-alive\n\n" in second.body and second.last["type"] == "done"


# ---- a non-streaming route's collected answer (CollectedResponse) ----

@pytest.mark.parametrize("path, body", [
    ("/v1/generate", {"prompt": PROMPT, "max_new_tokens": 6, "ignore_eos": True}),
    ("/v1/completions", {"model": "tiny", "prompt": PROMPT, "max_tokens": 6, "ignore_eos": True}),
])
async def test_a_collected_answer_is_sent_whole_and_its_stream_closed_once(tiny, path, body):
    async with running_service(cfg(), tiny) as svc:
        r = await svc.call(path, body)
        assert r.status == 200 and r.headers["x-request-id"]
        assert len(r.json().get("token_ids") or r.json()["choices"][0]["text"]) > 0
        stats = await svc.settle()
        assert_clean(stats)
        assert stats["streams_closed"] == 1 and stats["cancellations"]["client_gone"] == 0


async def test_a_client_leaving_a_collected_answer_is_released_and_nothing_is_rendered(tiny):
    async with running_service(cfg(), tiny) as svc:
        gone = asyncio.Event()
        call = asyncio.ensure_future(svc.call("/v1/generate", {"prompt": PROMPT, "max_new_tokens": 400,
                                                               "ignore_eos": True}, disconnect=gone))
        await svc.until(lambda s: s["running"] == 1)
        gone.set()  # Starlette's listen_for_disconnect hears it while the events are collected
        reply = await call
        assert reply.status == 499 and reply.body == b""
        stats = await svc.settle()
        assert_clean(stats)
        assert stats["cancellations"]["client_gone"] == 1 and stats["tokens_generated"] < 400


# ---- the lab's write-only response: the negative control ----

async def test_the_write_only_response_never_hears_the_client_leave(tiny):
    async with running_service(cfg(lab=True), tiny) as svc:
        gone = asyncio.Event()
        gone.set()  # gone before the first byte: a listening response would stop at once
        await svc.call("/v1/stream", {"prompt": PROMPT, "max_new_tokens": 60, "ignore_eos": True,
                                      "response_class": "write_only"}, disconnect=gone)
        stats = await svc.settle()
        assert_clean(stats)
        assert stats["cancellations"]["client_gone"] == 0 and stats["tokens_generated"] == 60
