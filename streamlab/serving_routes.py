"""The serving routes: /v1/stream, /v1/generate, OpenAI's /v1/completions, /v1/chat/completions
and /v1/models, and the page at /. Each admits through the same budget check and hub, and ends
through the same responses (streamlab/responses.py); the app (streamlab/app.py) mounts them.
"""

from __future__ import annotations

import time
from pathlib import Path

from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from streamlab.config import ServiceConfig
from streamlab.errors import InvalidRequest, ModelNotFound, RequestTooLarge
from streamlab.hub import Hub
from streamlab.hub.streams import StreamEvent
from streamlab.models import LoadedModel
from streamlab.openai_api import (ChatCompletionRequest, ChunkWriter, CompletionRequest, chat_prompt, error_object,
                                  full_response, models_list)
from streamlab.responses import (CollectedResponse, HubStreamingResponse, WriteOnlyStreamingResponse, openai_body,
                                 sse_body)
from streamlab.request_body import error_response, parse_body, read_json, read_request
from streamlab.sampling import SamplingParams

PAGE = Path(__file__).resolve().parent / "assets" / "page.html"


def serving_routes(config: ServiceConfig) -> list[Route]:
    """The routes a client streams from, over the hub in `request.state` (the app's lifespan owns it)."""
    started_at = int(time.time())

    def admit(request: Request, ids: list[int], params: SamplingParams, stops: list[str],
              ttft_deadline_ms: float | None = None):
        """Check the token budget and open a hub stream: the last refusals before the first byte."""
        if not ids:
            raise InvalidRequest("prompt: encodes to no tokens", "prompt")
        if len(ids) + params.max_new_tokens > config.max_tokens_budget:
            raise RequestTooLarge(f"prompt ({len(ids)} tokens) plus max_new_tokens ({params.max_new_tokens}) is "
                                  f"over the budget of {config.max_tokens_budget} tokens", "max_tokens")
        hub: Hub = request.state.hub
        deadline_ms = ttft_deadline_ms or config.ttft_deadline_ms or None
        return hub, hub.open(ids, params, stops, deadline_ms / 1e3 if deadline_ms else None)

    resume = config.resume
    retry_ms = resume.retry_ms if resume.on else None

    written_at = config.model == "null"  # its tokens carry the server's clock (streamlab.responses.sse_body)

    async def stream(request: Request) -> Response:
        last_event_id = request.headers.get("last-event-id")
        if last_event_id:  # a reconnect: the same stream from after that event (the body is not read again)
            hub: Hub = request.state.hub
            s, replay = hub.attach(last_event_id)
            return HubStreamingResponse(hub, s, sse_body(hub, s, config.keepalive_s, 0, replay, retry_ms, written_at),
                                        resumable=True)
        req = await read_request(request, config)
        hub, s = admit(request, request.state.model.tokenizer.encode(req.prompt), SamplingParams.of(req), req.stop,
                       req.ttft_deadline_ms)
        try:
            if req.response_class == "write_only":
                return WriteOnlyStreamingResponse(hub, s, sse_body(hub, s, config.keepalive_s, req.pad_bytes,
                                                                   written_at=written_at))
            return HubStreamingResponse(hub, s, sse_body(hub, s, config.keepalive_s, req.pad_bytes, (), retry_ms,
                                                         written_at), resumable=resume.on)
        except BaseException:
            hub.close(s, "internal_error")
            raise

    async def generate(request: Request) -> Response:
        req = await read_request(request, config)
        hub, s = admit(request, request.state.model.tokenizer.encode(req.prompt), SamplingParams.of(req), req.stop,
                       req.ttft_deadline_ms)
        def render(events: list[StreamEvent]) -> Response:
            text, ids, last = generation(events)
            if last.kind == "error":
                err = last.payload["error"]
                return error_response(err["type"], err["message"], 503)
            return JSONResponse({"type": "generation", "id": s.request_id, "text": text, "token_ids": ids,
                                 **last.payload}, headers={"X-Request-ID": s.request_id})
        return CollectedResponse(hub, s, render)

    async def openai_route(request: Request, chat: bool) -> Response:
        """/v1/completions and /v1/chat/completions: the same admission, hub and cleanup as /v1/stream."""
        data = await read_json(request, config)
        loaded: LoadedModel = request.state.model
        if chat:
            req = parse_body(ChatCompletionRequest, data)
            ids = loaded.tokenizer.encode(chat_prompt(req.messages))
            # Without a limit, what the budget leaves (as vLLM leaves what the context leaves).
            max_new = req.requested_tokens or max(1, config.max_tokens_budget - len(ids))
        else:
            req = parse_body(CompletionRequest, data)
            prompt = req.prompt_text_or_ids()
            ids = loaded.tokenizer.encode(prompt) if isinstance(prompt, str) else prompt
            if any(not 0 <= i < loaded.model.shape.vocab_size for i in ids):
                raise InvalidRequest(f"prompt: token ids must be in [0, {loaded.model.shape.vocab_size})", "prompt")
            max_new = req.max_tokens
        if req.model != loaded.name:
            raise ModelNotFound(f"the model `{req.model}` does not exist; this server serves `{loaded.name}`",
                                "model")
        hub, s = admit(request, ids, req.sampling(max_new), req.stops, req.ttft_deadline_ms)
        if req.stream:
            writer = ChunkWriter(chat, s.request_id, loaded.name, req.include_usage, req.return_token_ids,
                                 hidden(req, loaded), req.continuous_usage)
            try:
                return HubStreamingResponse(hub, s, openai_body(hub, s, config.keepalive_s, writer, ids))
            except BaseException:
                hub.close(s, "internal_error")
                raise
        def render(events: list[StreamEvent]) -> Response:
            text, token_ids, last = generation(events, hidden(req, loaded))
            if last.kind == "error":
                err = last.payload["error"]
                return JSONResponse(error_object(err["type"], err["message"], 503), status_code=503)
            return JSONResponse(full_response(chat, s.request_id, loaded.name, text, token_ids, last.payload,
                                              req.return_token_ids, ids), headers={"X-Request-ID": s.request_id})
        return CollectedResponse(hub, s, render)

    async def completions(request: Request) -> Response:
        return await openai_route(request, chat=False)

    async def chat_completions(request: Request) -> Response:
        return await openai_route(request, chat=True)

    async def models(request: Request) -> Response:
        return JSONResponse(models_list(request.state.model.name, started_at))

    page_html = PAGE.read_text(encoding="utf-8")  # once, not per request

    async def page(request: Request) -> Response:
        """A page that streams with the browser's EventSource and shows /stats (assets/page.html)."""
        return HTMLResponse(page_html)

    return [
        Route("/", page, methods=["GET"]),
        Route("/v1/stream", stream, methods=["GET", "POST"]),
        Route("/v1/generate", generate, methods=["POST"]),
        Route("/v1/completions", completions, methods=["POST"]),
        Route("/v1/chat/completions", chat_completions, methods=["POST"]),
        Route("/v1/models", models, methods=["GET"]),
    ]


def generation(events: list[StreamEvent], hidden_ids: frozenset[int] = frozenset()
               ) -> tuple[str, list[int], StreamEvent]:
    """A collected stream (the non-streaming routes): its text (less the text of `hidden_ids`),
    its token ids, its last event."""
    tokens = [e.payload for e in events if e.kind == "token"]
    text = "".join(t["text"] for t in tokens if t["token_id"] not in hidden_ids)
    return text, [t["token_id"] for t in tokens], events[-1]


def hidden(req, loaded: LoadedModel) -> frozenset[int]:
    """The tokens whose text an OpenAI request leaves out: the special ones, with skip_special_tokens."""
    if not req.skip_special_tokens:
        return frozenset()
    return frozenset(loaded.tokenizer.get_added_vocab().values()) | {loaded.tokenizer.eos_token_id}
