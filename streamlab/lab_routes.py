"""The lab's routes (only with --lab): the chapter's buffer measurement, a response that writes
events as fast as it can to a client that never reads, and how many bytes were accepted before a
write blocked (`streamlab lab buffers`)."""

from __future__ import annotations

import asyncio

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from streamlab.config import ServiceConfig
from streamlab.errors import InvalidRequest, NotAllowed
from streamlab.sse import encode_event


def lab_routes(config: ServiceConfig) -> list[Route]:
    async def lab_flood(request: Request) -> Response:
        """Lab: write events of `event_bytes` as fast as possible to a client that does not read;
        note how many bytes were accepted before a write blocked (the chapter's buffer figure)."""
        if not config.lab:
            raise NotAllowed("/lab routes need --lab")
        try:
            size = int(request.query_params.get("event_bytes", "1024"))
        except ValueError:
            raise InvalidRequest("event_bytes: an integer") from None
        if not 9 <= size <= 1024 * 1024:
            raise InvalidRequest("event_bytes: between 9 and 1048576")
        return FloodResponse(size, request.query_params.get("id", "flood"), request.state.lab_results)

    async def lab_flood_result(request: Request) -> Response:
        if not config.lab:
            raise NotAllowed("/lab routes need --lab")
        key = request.query_params.get("id", "flood")
        results = request.state.lab_results
        return JSONResponse({"id": key, "accepted_bytes": results.get(key)}, status_code=200 if key in results else 404)

    return [Route("/lab/flood", lab_flood, methods=["GET"]), Route("/lab/flood-result", lab_flood_result, methods=["GET"])]


class FloodResponse(Response):
    BLOCKED_S = 0.05  # a write that takes this long was waiting for the socket to drain
    LIMIT_BYTES = 64 * 1024 * 1024

    def __init__(self, event_bytes: int, key: str, results: dict) -> None:
        # No Response.__init__: it would declare content-length 0 and the body would go nowhere.
        self.raw_headers = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]
        self.background = None
        self.event = encode_event("x" * (event_bytes - 8))  # "data: " + payload + "\n\n"
        self.key, self.results = key, results

    async def __call__(self, scope, receive, send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
        accepted = 0
        pending = None
        while accepted < self.LIMIT_BYTES:
            pending = asyncio.ensure_future(send({"type": "http.response.body", "body": self.event, "more_body": True}))
            done, _ = await asyncio.wait({pending}, timeout=self.BLOCKED_S)
            if not done:
                break  # this write is waiting for a reader that never comes
            accepted += len(self.event)
        self.results[self.key] = accepted
        try:
            await asyncio.wait_for(receive(), 10)  # until the client goes
        except asyncio.TimeoutError:
            pass
        finally:
            if pending is not None and not pending.done():
                pending.cancel()
