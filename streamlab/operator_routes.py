"""The operator's routes: /stats and /healthz, and, only with --debug or on --admin-port
(streamlab/access.py), /metrics and /debug/*: the books the harness reads after a run (releases,
steps, invariants, sizes, the parsed configuration) and the engine's speed for the drift check."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os

import anyio
import torch
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from streamlab.config import ServiceConfig
from streamlab.engine.faults import FaultPlan
from streamlab.hub import Hub
from streamlab.models import LoadedModel


def operator_routes(config: ServiceConfig) -> list[Route]:
    async def stats(request: Request) -> Response:
        return JSONResponse(request.state.hub.stats())

    async def healthz(request: Request) -> Response:
        hub: Hub = request.state.hub
        ok = hub.failure is None
        # degraded: some steps failed and their requests got errors, but the engine goes on.
        status = "failed" if not ok else "degraded" if hub.engine.step_errors else "ok"
        return JSONResponse({"status": status, "draining": hub.draining, "engine_step_errors": hub.engine.step_errors,
                             "last_engine_error": hub.engine.last_step_error,
                             "failure": hub.failure_traceback.splitlines()[-1] if hub.failure_traceback else None},
                            status_code=200 if ok else 503)

    async def metrics(request: Request) -> Response:
        return Response(request.state.metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")

    async def invariants(request: Request) -> Response:
        hub: Hub = request.state.hub
        return JSONResponse({"violations": hub.engine.check_invariants()})

    async def releases(request: Request) -> Response:
        hub: Hub = request.state.hub
        return JSONResponse({"releases": [vars(r) for r in list(hub.books.releases)],
                             "closed_streams": [{"request_id": rid, "reason": why, "max_queued_events": peak}
                                                for rid, why, peak in list(hub.books.closed_streams)],
                             "ledger_problems_when_idle": hub.engine.check_released()})

    async def sizes(request: Request) -> Response:
        """What a long-running server holds: per-stream collections, event loop tasks, memory, fds."""
        hub: Hub = request.state.hub
        return JSONResponse({**hub.sizes(), "loop_tasks": len(asyncio.all_tasks()), **process_usage()})

    async def steps(request: Request) -> Response:
        """The step thread's recent steps: when each began, how long it took, what it did."""
        hub: Hub = request.state.hub
        return JSONResponse({"steps": [r._asdict() for r in list(hub.books.step_log)]})

    async def engine_speed_route(request: Request) -> Response:
        """The engine's decode step alone, now (a fresh engine of this server's model, attention and
        lab slowdown, on a worker thread), each burst paired with transformers' own GPT-2 step on
        the same weights: the harness's drift check compares their ratio with its profile's."""
        from streamlab.bench_step import engine_speed

        slowdown = FaultPlan(step_slowdown=config.lab_step_slowdown) if config.lab_step_slowdown != 1 else None
        loaded: LoadedModel = request.state.model
        speed = await anyio.to_thread.run_sync(engine_speed, loaded, config.engine.decode_attention, slowdown)
        return JSONResponse({**speed, "clock": "thread CPU time"})

    async def config_route(request: Request) -> Response:
        """The configuration this server parsed (the harness checks it equals the simulation's)."""
        shown = dataclasses.replace(config, api_key="(set)" if config.api_key else "")  # never the key itself
        return JSONResponse(json.loads(json.dumps(dataclasses.asdict(shown), default=str)))

    # /health too: the name vLLM, llama-server, TGI and SGLang serve it under, which load tools
    # check before they start (guidellm's openai_http backend refuses to run on a 404 there).
    return [Route("/stats", stats, methods=["GET"]), Route("/healthz", healthz, methods=["GET"]),
            Route("/health", healthz, methods=["GET"]),
            Route("/metrics", metrics, methods=["GET"]), Route("/debug/invariants", invariants, methods=["GET"]),
            Route("/debug/releases", releases, methods=["GET"]), Route("/debug/steps", steps, methods=["GET"]),
            Route("/debug/config", config_route, methods=["GET"]),
            Route("/debug/engine-speed", engine_speed_route, methods=["GET"]),
            Route("/debug/sizes", sizes, methods=["GET"])]


def process_usage() -> dict[str, int]:
    """This process's resident memory and open file descriptors (Linux /proc; absent elsewhere), and
    the torch threads its steps use."""
    out: dict[str, int] = {}
    try:
        with open("/proc/self/statm") as f:
            out["rss_bytes"] = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        out["open_fds"] = len(os.listdir("/proc/self/fd"))
    except OSError:
        pass
    out["torch_threads"] = torch.get_num_threads()  # intra-op threads the steps use (OMP_NUM_THREADS)
    return out
