"""The OpenAI-compatible routes on a real uvicorn server, driven by the official `openai` client."""

from __future__ import annotations

import asyncio

import openai
import pytest

from streamlab.config import CacheConfig, EngineConfig, ServiceConfig
from streamlab.openai_api import chat_prompt, ChatMessage
from tests.asgi import assert_clean
from tests.live import live_server

# Times nothing (read for it): may run beside another such item under xdist (harness/cores_lock.py).
pytestmark = pytest.mark.shares_cores

PROMPT = "Return the number of items in the container."


def config(max_batch: int = 4, **kw) -> ServiceConfig:
    return ServiceConfig(engine=EngineConfig(max_batch=max_batch, cache=CacheConfig(num_blocks=512)), **kw)


@pytest.fixture(scope="module")
def server(tiny):
    with live_server(config(), tiny) as srv:
        yield srv


OPEN_CLIENTS: list[openai.OpenAI] = []


def client(server, **kw) -> openai.OpenAI:
    c = openai.OpenAI(base_url=f"http://127.0.0.1:{server.port}/v1", api_key="unused", max_retries=0, **kw)
    OPEN_CLIENTS.append(c)
    return c


@pytest.fixture(autouse=True)
def close_clients():
    """Each test's clients close their connection pools (an unclosed socket is a warning later)."""
    yield
    while OPEN_CLIENTS:
        OPEN_CLIENTS.pop().close()


def settled(server) -> dict:
    return asyncio.run(server.settle())


def native(server, body: dict) -> dict:
    async def call():
        ex = await server.request("POST", "/v1/generate", body)
        try:
            return await ex.read_json()
        finally:
            ex.close_fin()
    return asyncio.run(call())


def test_models_lists_the_served_model(server):
    models = client(server).models.list()
    assert [m.id for m in models.data] == ["tiny"]


def test_streamed_completion_equals_our_own_route(server):
    c = client(server)
    chunks = list(c.completions.create(model="tiny", prompt=PROMPT, max_tokens=12, temperature=0, stream=True,
                                       stream_options={"include_usage": True},
                                       extra_body={"ignore_eos": True, "return_token_ids": True}))
    ours = native(server, {"prompt": PROMPT, "max_new_tokens": 12, "ignore_eos": True})
    content = [ch for ch in chunks if ch.choices]
    assert "".join(ch.choices[0].text for ch in content) == ours["text"]
    ids = [i for ch in content for i in (ch.choices[0].model_extra or {}).get("token_ids", [])]
    assert ids == ours["token_ids"]
    assert content[-1].choices[0].finish_reason == "length"
    assert all(ch.choices[0].finish_reason is None for ch in content[:-1])
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 12
    assert chunks[-1].usage.prompt_tokens == ours["usage"]["prompt_tokens"]
    assert len({ch.id for ch in chunks}) == 1 and chunks[0].id.startswith("cmpl-req-")
    assert_clean(settled(server))


def test_continuous_usage_stats_puts_the_usage_so_far_in_every_chunk(server):
    """vLLM's stream_options extension, which guidellm sends: with include_usage, each chunk
    carries the usage so far; the last, choice-less chunk the whole."""
    chunks = list(client(server).completions.create(
        model="tiny", prompt=PROMPT, max_tokens=5, temperature=0, stream=True,
        stream_options={"include_usage": True, "continuous_usage_stats": True}, extra_body={"ignore_eos": True}))
    counts = [ch.usage.completion_tokens for ch in chunks]
    assert counts == [1, 2, 3, 4, 5, 5, 5], counts  # five tokens, the finish chunk, the usage chunk
    assert {ch.usage.prompt_tokens for ch in chunks} == {chunks[-1].usage.prompt_tokens} and chunks[-1].choices == []
    assert all(ch.usage.total_tokens == ch.usage.prompt_tokens + ch.usage.completion_tokens for ch in chunks)
    assert_clean(settled(server))


def test_non_streaming_completion_and_stop(server):
    c = client(server)
    full = c.completions.create(model="tiny", prompt=PROMPT, max_tokens=20, temperature=0,
                                extra_body={"ignore_eos": True})
    text = full.choices[0].text
    assert full.usage.completion_tokens == 20 and full.choices[0].finish_reason == "length"
    stop = text[len(text) // 2:][:3]
    stopped = c.completions.create(model="tiny", prompt=PROMPT, max_tokens=20, temperature=0, stop=[stop],
                                   extra_body={"ignore_eos": True})
    assert stopped.choices[0].finish_reason == "stop"
    assert stopped.choices[0].text == text[:text.index(stop)]
    assert_clean(settled(server))


def test_sampling_with_a_seed_repeats(server):
    c = client(server)
    runs = [c.completions.create(model="tiny", prompt=PROMPT, max_tokens=10, temperature=0.9, top_p=0.95, seed=7,
                                 extra_body={"ignore_eos": True}).choices[0].text for _ in range(2)]
    assert runs[0] == runs[1]


def test_streamed_chat_uses_the_documented_prompt_format(server):
    c = client(server)
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": PROMPT}]
    chunks = list(c.chat.completions.create(model="tiny", messages=messages, max_completion_tokens=8, temperature=0,
                                            stream=True, extra_body={"ignore_eos": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks)
    prompt = chat_prompt([ChatMessage.model_validate(m) for m in messages])
    assert prompt == f"System: Be brief.\nUser: {PROMPT}\nAssistant:"
    assert text == native(server, {"prompt": prompt, "max_new_tokens": 8, "ignore_eos": True})["text"]
    assert chunks[-1].choices[0].finish_reason == "length"
    whole = c.chat.completions.create(model="tiny", messages=messages, max_tokens=8, temperature=0,
                                      extra_body={"ignore_eos": True})
    assert whole.choices[0].message.content == text and whole.object == "chat.completion"
    assert_clean(settled(server))


REFUSALS = [
    # (create kwargs, status, our error type, param)
    ({"model": "gpt-4o"}, 404, "model_not_found", "model"),
    ({"n": 2}, 422, "invalid_request", "n"),
    ({"max_tokens": 5000}, 422, "request_too_large", "max_tokens"),
    ({"extra_body": {"surprise": 1}}, 422, "invalid_request", "surprise"),
    ({"stop": ["a", "b", "c", "d", "e"]}, 422, "invalid_request", None),
    ({"temperature": 3}, 422, "invalid_request", "temperature"),
    ({"stream_options": {"include_usage": True}}, 422, "invalid_request", None),
]


@pytest.mark.parametrize("kwargs,status,code,param", REFUSALS)
def test_refusals_are_openai_error_objects_with_our_statuses(server, kwargs, status, code, param):
    args = {"model": "tiny", "prompt": PROMPT, "max_tokens": 4} | kwargs
    with pytest.raises(openai.APIStatusError) as caught:
        client(server).completions.create(**args)
    err = caught.value
    assert err.status_code == status
    body = err.response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}
    assert body["error"]["code"] == code and body["error"]["message"]
    if param is not None:
        assert body["error"]["param"] == param
    assert_clean(settled(server))


def test_bad_bodies_on_openai_routes_get_openai_errors(server):
    async def call(path, body, headers=None):
        ex = await server.request("POST", path, body, headers=headers)
        try:
            head = await ex.read_head()
            return head.status, await ex.read_json()
        finally:
            ex.close_fin()
    for path in ("/v1/completions", "/v1/chat/completions"):
        status, body = asyncio.run(call(path, b"{not json", {"content-type": "application/json"}))
        assert status == 400 and body["error"]["code"] == "invalid_json"
        status, body = asyncio.run(call(path, b"{}", {"content-type": "text/plain"}))
        assert status == 415 and body["error"]["type"] == "invalid_request_error"
    status, body = asyncio.run(call("/v1/chat/completions", {"model": "tiny", "messages": []}))
    assert status == 422 and body["error"]["param"] == "messages"
    assert_clean(settled(server))


def test_closing_an_openai_stream_early_releases_within_one_step(tiny):
    with live_server(config(max_batch=1), tiny) as server:
        c = client(server)
        for api in ("completions", "chat"):
            if api == "completions":
                stream = c.completions.create(model="tiny", prompt=PROMPT, max_tokens=900, temperature=0, stream=True,
                                              extra_body={"ignore_eos": True})
            else:
                stream = c.chat.completions.create(model="tiny", messages=[{"role": "user", "content": PROMPT}],
                                                   max_tokens=900, temperature=0, stream=True,
                                                   extra_body={"ignore_eos": True})
            request_id = stream.response.headers["x-request-id"]
            for i, _ in enumerate(stream):
                if i == 20:
                    break
            stream.close()
            stats = settled(server)
            assert_clean(stats)
            record = asyncio.run(server.release_of(request_id))
            assert record["reason"] == "cancelled" and record["completion_tokens"] < 900
            assert record["release_step"] <= record["closed_after_step"] + 1, record
        assert stats["cancellations"]["client_gone"] == 2


def _known_to(method, params: dict) -> tuple[dict, dict]:
    """Split params into those `method` (the installed client's) takes and the rest (sent as extra_body)."""
    import inspect

    names = set(inspect.signature(method).parameters)
    return {k: v for k, v in params.items() if k in names}, {k: v for k, v in params.items() if k not in names}


def test_the_official_client_with_every_documented_parameter_at_its_default(server):
    """Issue 44: what the official client sends when a caller spells out each default."""
    from streamlab.openai_fields import CHAT, COMPLETIONS, on_route

    c = client(server)
    for route, create in ((COMPLETIONS, c.completions.create), (CHAT, c.chat.completions.create)):
        params = {f.name: f.documented_default for f in on_route(route) if f.origin == "OpenAI"}
        params |= {"model": "tiny", "max_tokens": 4, "stream": False, "stream_options": None}
        if route == CHAT:
            params["max_completion_tokens"] = 4
        given, extra = _known_to(create, params)
        reply = create(**given, extra_body=extra or None)
        assert reply.choices[0].finish_reason == "length" and reply.usage.completion_tokens == 4, (route, reply)
    assert_clean(settled(server))
