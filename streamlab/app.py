"""create_app(): routes, the error table, and a lifespan that owns the hub. No engine logic.

Everything that can be refused is refused before the first byte, as JSON:
{"type": "error", "error": {"type": ..., "message": ...}}, or on the OpenAI routes as OpenAI's
error object {"error": {"message", "type", "param", "code"}} with the same status. After the
stream opens, a failure can only be an `error` event (a `data: {"error": ...}` line on the
OpenAI routes).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from pathlib import Path
from contextlib import asynccontextmanager
from collections.abc import Callable

import anyio
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from streamlab.access import AccessGuard
from streamlab.config import CacheConfig, EngineConfig, ServiceConfig
from streamlab.engine.engine import BatchEngine
from streamlab.engine.faults import FaultPlan
from streamlab.errors import InvalidRequest, ModelNotFound, Overloaded, RequestError, RequestTooLarge, http_status
from streamlab.hub import Hub
from streamlab.streams import StreamEvent
from streamlab.metrics import Metrics
from streamlab.models import LoadedModel, load_model
from streamlab.openai_api import (ChatCompletionRequest, ChunkWriter, CompletionRequest, chat_prompt, error_object,
                                  error_payload, full_response, models_list)
from streamlab.responses import (CollectedResponse, HubStreamingResponse, WriteOnlyStreamingResponse, openai_body,
                                 sse_body)
from streamlab.lab_routes import lab_routes
from streamlab.operator_routes import operator_routes
from streamlab.request_body import error_response, parse_body, read_json, read_request
from streamlab.sampling import SamplingParams

log = logging.getLogger("streamlab.app")
PAGE = Path(__file__).resolve().parent / "assets" / "page.html"
server_log = logging.getLogger("uvicorn.error")  # configured by uvicorn, so it reaches the console


def create_app(config: ServiceConfig = ServiceConfig(), loaded: LoadedModel | None = None,
               clock: Callable[[], float] | None = None, threaded: bool = True) -> Starlette:
    """`clock` and `threaded=False` are for the simulation, which drives the engine on virtual time."""
    started_at = int(time.time())

    @asynccontextmanager
    async def lifespan(app: Starlette):
        model = loaded or load_model(config.model, null_step_s=config.null_step_ms / 1000)
        async with anyio.create_task_group():  # anyio imports its asyncio backend on first use (~15 ms
            pass  # here): at start-up, not in the first client's time to first token
        fault = FaultPlan(config.fault_step, config.fault_rate, config.fault_seed, config.lab_step_slowdown,
                          config.lab_defect) \
            if config.fault_step or config.fault_rate or config.lab_step_slowdown != 1 or config.lab_defect else None
        hub = Hub(BatchEngine(model.model, config.engine, fault), model.tokenizer, config.backpressure,
                  config.waiting_limit, **({"clock": clock} if clock else {}), first_token=config.first_token,
                  resume=config.resume, admission=config.admission, defect=config.lab_defect)
        metrics = Metrics(hub)
        hub.start(threaded=threaded, warm_up=lambda: warm_up(model, config.engine))
        app.state.hub = hub  # for the server's signal handler (graceful shutdown)
        try:
            yield {"hub": hub, "model": model, "metrics": metrics, "lab_results": {}}
        finally:
            # Streams were ended before this (see server.py): uvicorn runs lifespan shutdown
            # only after connections close. This stops the step thread and checks the books.
            problems = await hub.stop()
            stats = hub.stats()
            server_log.log(logging.ERROR if problems else logging.INFO,
                           "streamlab: engine %s at shutdown: %d releases, %d/%d blocks free%s",
                           "NOT CLEAN" if problems else "clean", stats["releases"], stats["blocks_free"],
                           stats["blocks_total"], f": {problems}" if problems else "")

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
            writer = ChunkWriter(chat, s.request_id, loaded.name, req.include_usage, req.return_token_ids)
            try:
                return HubStreamingResponse(hub, s, openai_body(hub, s, config.keepalive_s, writer, ids))
            except BaseException:
                hub.close(s, "internal_error")
                raise
        def render(events: list[StreamEvent]) -> Response:
            text, token_ids, last = generation(events)
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

    def refuse(request: Request, error_type: str, message: str, status: int, headers: dict | None = None,
               param: str | None = None) -> Response:
        """Our error envelope, or OpenAI's error object on the OpenAI routes; the same status either way."""
        return JSONResponse(error_payload(request.url.path, error_type, message, status, param), status_code=status,
                            headers=headers)

    async def on_request_error(request: Request, exc: RequestError) -> Response:
        request.state.hub.books.counters["requests_refused"] += 1
        headers = {"Retry-After": str(getattr(exc, "retry_after_s", 1))} if isinstance(exc, Overloaded) else None
        return refuse(request, exc.error_type, str(exc), http_status(exc), headers, exc.param)

    async def on_http_error(request: Request, exc: HTTPException) -> Response:
        kind = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return refuse(request, kind, str(exc.detail), exc.status_code, exc.headers)

    async def on_unexpected(request: Request, exc: Exception) -> Response:
        log.exception("unexpected error")
        return refuse(request, "internal_error", "an internal error occurred", 500)

    routes = [
        Route("/", page, methods=["GET"]),
        Route("/v1/stream", stream, methods=["GET", "POST"]),
        Route("/v1/generate", generate, methods=["POST"]),
        Route("/v1/completions", completions, methods=["POST"]),
        Route("/v1/chat/completions", chat_completions, methods=["POST"]),
        Route("/v1/models", models, methods=["GET"]),
        *operator_routes(config),  # /stats, /healthz, /metrics, /debug/* (streamlab/access.py says where)
        *lab_routes(config),  # /lab/*, only with --lab
    ]
    return Starlette(routes=routes, lifespan=lifespan, exception_handlers={
        RequestError: on_request_error, HTTPException: on_http_error, Exception: on_unexpected},
        middleware=[Middleware(AccessGuard, api_key=config.api_key, debug=config.debug,
                               admin_port=config.admin_port, max_headers=config.max_headers)])


def warm_up(loaded: LoadedModel, like: EngineConfig = EngineConfig()) -> None:
    """A few short generations before serving, so the first clients do not pay for lazy set-up:
    kernels, the cast under another dtype, and the allocator's first touch of activations the
    size of a full step (a fresh server's first 55-token prefill took 2-3x its later cost)."""
    budget = like.step_token_budget or like.prefill_pass_tokens
    lengths = [max(1, budget // 2), max(1, budget // 2 - 8), 8]
    blocks = sum(like.cache.blocks_for(n + 4) for n in lengths)
    engine = BatchEngine(loaded.model, dataclasses.replace(like, max_batch=len(lengths),
                                                           cache=CacheConfig(num_blocks=blocks)))
    token = loaded.model.eos_token_id or 0
    for i, n in enumerate(lengths):
        engine.submit(f"warm-up-{i}", [token] * n, SamplingParams(max_new_tokens=4, ignore_eos=True))
    for _ in range(32):
        if not engine.has_work():
            break
        engine.step()


def generation(events: list[StreamEvent]) -> tuple[str, list[int], StreamEvent]:
    """A collected stream (the non-streaming routes): its text, its token ids, its last event."""
    tokens = [e.payload for e in events if e.kind == "token"]
    return "".join(t["text"] for t in tokens), [t["token_id"] for t in tokens], events[-1]
