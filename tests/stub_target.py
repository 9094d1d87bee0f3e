"""A small OpenAI-compatible streaming server with vLLM's gauges, for testing target mode.

It is deliberately simple: `slots` requests at a time, each streaming `max_tokens` chunks of
deterministic text. With `leak=True` a request whose client leaves keeps its slot and stays
counted in `vllm:num_requests_running` forever: the bug the target checks must catch.
"""

from __future__ import annotations

import asyncio
import json

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route


def stub_app(slots: int = 4, leak: bool = False, token_s: float = 0.005) -> Starlette:
    state = {"running": 0}

    async def completions(request: Request) -> Response:
        body = json.loads(await request.body())
        if state["running"] >= slots:
            return JSONResponse({"error": {"message": "no free slot", "type": "server_error", "param": None,
                                           "code": "busy"}}, status_code=503)
        state["running"] += 1
        words = str(body["prompt"]).split() or ["x"]

        async def chunks():
            finished = False
            try:
                for i in range(body["max_tokens"]):
                    await asyncio.sleep(token_s)
                    text = f" {words[i % len(words)]}"
                    yield f"data: {json.dumps({'choices': [{'index': 0, 'text': text, 'finish_reason': None}]})}\n\n"
                yield f"data: {json.dumps({'choices': [{'index': 0, 'text': '', 'finish_reason': 'length'}]})}\n\n"
                yield "data: [DONE]\n\n"
                finished = True
            finally:
                if finished or not leak:
                    state["running"] -= 1
        return StreamingResponse(chunks(), media_type="text/event-stream")

    async def metrics(request: Request) -> Response:
        return PlainTextResponse(
            "# TYPE vllm:num_requests_running gauge\n"
            f'vllm:num_requests_running{{model_name="stub"}} {state["running"]}\n'
            "# TYPE vllm:num_requests_waiting gauge\n"
            'vllm:num_requests_waiting{model_name="stub"} 0\n')

    async def models(request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{"id": "stub", "object": "model"}]})

    async def health(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    return Starlette(routes=[Route("/v1/completions", completions, methods=["POST"]),
                             Route("/metrics", metrics), Route("/v1/models", models), Route("/health", health)])
