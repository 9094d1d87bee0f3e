"""Issue 44: every field of OpenAI's completions and chat schemas, and the extensions engines'
clients send, is known (streamlab/openai_fields.py, the one table); at its default it is accepted
and changes nothing; at a value we do not implement it is refused before the first byte, by name."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from streamlab.config import CacheConfig, EngineConfig, ServiceConfig
from streamlab.openai_api import ChatCompletionRequest, CompletionRequest
from streamlab.openai_fields import CHAT, COMPLETIONS, docs_table, field_on, on_route
from tests.asgi import assert_clean, running_service

pytestmark = pytest.mark.shares_cores

SERVING = Path(__file__).resolve().parents[1] / "docs" / "SERVING.md"
PATHS = {COMPLETIONS: "/v1/completions", CHAT: "/v1/chat/completions"}
MODELS = {COMPLETIONS: CompletionRequest, CHAT: ChatCompletionRequest}
# The 31 the issue sent alone at their defaults (15 accepted then, 16 refused with 422).
ISSUE_SET = {
    COMPLETIONS: ["model", "prompt", "best_of", "echo", "frequency_penalty", "logit_bias", "logprobs", "max_tokens",
                  "n", "presence_penalty", "seed", "stop", "stream", "suffix", "temperature", "top_p", "user"],
    CHAT: ["frequency_penalty", "logit_bias", "logprobs", "top_logprobs", "presence_penalty", "response_format",
           "tools", "tool_choice", "parallel_tool_calls", "max_completion_tokens", "n", "seed", "stop",
           "temperature"],
}


def base(route: str) -> dict:
    first = {"prompt": "Hello"} if route == COMPLETIONS else {"messages": [{"role": "user", "content": "Hello"}]}
    return {"model": "tiny", **first, "max_tokens": 2}


def default_of(route: str, name: str):
    return field_on(route, name).documented_default


def test_the_table_and_the_request_models_agree():
    for route, model in MODELS.items():
        implemented = {f.name for f in on_route(route) if f.kind == "implemented"}
        assert implemented == set(model.model_fields), route  # every field the model has, and no other
    assert set(ISSUE_SET[COMPLETIONS]) <= {f.name for f in on_route(COMPLETIONS)}
    assert set(ISSUE_SET[CHAT]) <= {f.name for f in on_route(CHAT)}
    assert len(ISSUE_SET[COMPLETIONS]) + len(ISSUE_SET[CHAT]) == 31


def test_docs_serving_carries_the_table_as_it_is():
    text = SERVING.read_text()
    match = re.search(r"<!-- openai-fields -->\n(.*?)\n<!-- /openai-fields -->", text, re.S)
    assert match, "docs/SERVING.md: the table between <!-- openai-fields --> markers"
    assert match.group(1).strip() == docs_table().strip(), "regenerate: python -m streamlab.openai_fields"


@pytest.mark.asyncio
async def test_every_known_field_alone_at_its_default_is_accepted_and_changes_nothing(tiny):
    config = ServiceConfig(engine=EngineConfig(max_batch=4, cache=CacheConfig(num_blocks=256)))
    async with running_service(config, tiny) as svc:
        for route in (COMPLETIONS, CHAT):
            plain = await svc.call(PATHS[route], {**base(route), "temperature": 0})
            assert plain.status == 200, plain.body
            for f in on_route(route):
                if f.name in ("model", "prompt", "messages", "max_tokens", "temperature"):
                    continue
                body = {**base(route), "temperature": 0, f.name: default_of(route, f.name)}
                reply = await svc.call(PATHS[route], body)
                assert reply.status == 200, (route, f.name, bytes(reply.body[:300]))
                if f.name not in ("stream", "return_token_ids", "top_k", "max_completion_tokens"):
                    assert reply.json()["choices"] == plain.json()["choices"], (route, f.name)  # changes nothing
        assert_clean(await svc.settle())


@pytest.mark.asyncio
@pytest.mark.parametrize("route,field,value", [
    (COMPLETIONS, "n", 3), (COMPLETIONS, "echo", True), (COMPLETIONS, "logprobs", 5),
    (CHAT, "n", 3), (CHAT, "logprobs", True), (COMPLETIONS, "best_of", 2), (CHAT, "presence_penalty", 0.5),
    (CHAT, "logit_bias", {"50256": -100}), (CHAT, "tools", [{"type": "function", "function": {"name": "f"}}]),
    (CHAT, "response_format", {"type": "json_object"}), (COMPLETIONS, "repetition_penalty", 1.2),
    (COMPLETIONS, "include_stop_str_in_output", True), (COMPLETIONS, "surprise", True),
    (CHAT, "suffix", None),  # a completions field on the chat route: unknown there
])
async def test_a_value_we_do_not_implement_is_refused_before_the_first_byte_by_name(tiny, route, field, value):
    async with running_service(ServiceConfig(), tiny) as svc:
        for stream in (True, False):
            reply = await svc.call(PATHS[route], {**base(route), "stream": stream, field: value})
            assert reply.status == 422 and not reply.events, bytes(reply.body)
            error = reply.json()["error"]
            assert error["param"] == field and field in error["message"], error
            row = field_on(route, field)
            if row is not None and row.kind == "neutral":
                assert "not supported" in error["message"], error
        assert_clean(await svc.settle())


def test_skip_special_tokens_leaves_end_of_texts_text_out_and_keeps_its_id():
    from streamlab.hub.streams import StreamEvent
    from streamlab.serving_routes import generation

    events = [StreamEvent("token", {"token_id": 11, "text": "a"}), StreamEvent("token", {"token_id": 50256,
              "text": "<|endoftext|>"}), StreamEvent("done", {"finish_reason": "length"})]
    assert generation(events)[:2] == ("a<|endoftext|>", [11, 50256])
    assert generation(events, frozenset({50256}))[:2] == ("a", [11, 50256])
    assert CompletionRequest.model_validate({**base(COMPLETIONS), "top_k": -1}).top_k == 0  # vLLM's "no limit"
