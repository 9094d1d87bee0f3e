"""create_app(): the lifespan that owns the hub, the routes mounted, the error table. No engine logic.

Everything that can be refused is refused before the first byte, as JSON:
{"type": "error", "error": {"type": ..., "message": ...}}, or on the OpenAI routes as OpenAI's
error object {"error": {"message", "type", "param", "code"}} with the same status. After the
stream opens, a failure can only be an `error` event (a `data: {"error": ...}` line on the
OpenAI routes).
"""

from __future__ import annotations

import dataclasses
import logging
from contextlib import asynccontextmanager
from collections.abc import Callable

import anyio
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from streamlab.access import AccessGuard
from streamlab.config import CacheConfig, EngineConfig, ServiceConfig
from streamlab.engine.engine import BatchEngine
from streamlab.engine.faults import FaultPlan
from streamlab.errors import Overloaded, RequestError, http_status
from streamlab.hub import Hub
from streamlab.metrics import Metrics
from streamlab.models import LoadedModel, load_model
from streamlab.openai_api import error_payload
from streamlab.lab_routes import lab_routes
from streamlab.operator_routes import operator_routes
from streamlab.sampling import SamplingParams
from streamlab.serving_routes import serving_routes

log = logging.getLogger("streamlab.app")
server_log = logging.getLogger("uvicorn.error")  # configured by uvicorn, so it reaches the console


def create_app(config: ServiceConfig = ServiceConfig(), loaded: LoadedModel | None = None,
               clock: Callable[[], float] | None = None, threaded: bool = True) -> Starlette:
    """`clock` and `threaded=False` are for the simulation, which drives the engine on virtual time."""

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
        *serving_routes(config),  # /, /v1/stream, /v1/generate, the OpenAI routes (streamlab/serving_routes.py)
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
