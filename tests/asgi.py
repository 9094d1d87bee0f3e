"""Call the ASGI app directly with our own receive/send, under a deadline.

TestClient and httpx's ASGITransport buffer whole bodies, so they cannot show streaming or
disconnects. Here the test decides when the client leaves (`disconnect`) and how fast it
reads (`on_event`, awaited inside send: a slow send is a slow reader). The request's scope and
receive() are the simulation's own (harness/sim/asgi.py).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from starlette.applications import Starlette

from harness.sim.asgi import http_scope, request_receive
from streamlab.app import create_app
from streamlab.config import ServiceConfig
from streamlab.idle import drained
from streamlab.sse import SSEEvent, SSEParser

DEADLINE_S = 60.0


@dataclass
class Reply:
    status: int | None = None
    headers: dict[str, str] = field(default_factory=dict)
    body: bytearray = field(default_factory=bytearray)
    events: list[SSEEvent] = field(default_factory=list)
    event_times: list[float] = field(default_factory=list)
    parser: SSEParser = field(default_factory=SSEParser)
    complete: bool = False

    def json(self) -> dict:
        return json.loads(self.body)

    @property
    def tokens(self) -> list[dict]:
        return [e.json() for e in self.events if e.event == "token"]

    @property
    def last(self) -> dict:
        return self.events[-1].json()


@dataclass
class Service:
    app: Starlette
    state: dict

    @property
    def hub(self):
        return self.state["hub"]

    async def call(self, path: str, body: dict | bytes | None = None, method: str = "POST",
                   headers: dict[str, str] | None = None, disconnect: asyncio.Event | None = None,
                   on_event: Callable[[Reply, SSEEvent], Awaitable[None]] | None = None,
                   deadline_s: float = DEADLINE_S) -> Reply:
        raw = body if isinstance(body, bytes) else (json.dumps(body).encode() if body is not None else b"")
        hdrs = {"content-type": "application/json", **(headers or {})}
        reply = Reply()
        gone = disconnect or asyncio.Event()
        loop = asyncio.get_running_loop()

        async def send(message):
            if message["type"] == "http.response.start":
                reply.status = message["status"]
                reply.headers = {k.decode().lower(): v.decode() for k, v in message["headers"]}
                return
            chunk = message.get("body", b"")
            reply.body += chunk
            for event in reply.parser.feed(chunk):
                reply.events.append(event)
                reply.event_times.append(loop.time())
                if on_event is not None:
                    await on_event(reply, event)
            if not message.get("more_body", False):
                reply.complete = True
                gone.set()  # the exchange is over: what a server sees as the connection closing

        scope = http_scope(method, path, hdrs, self.state, client=("127.0.0.1", 50000))
        await asyncio.wait_for(self.app(scope, request_receive(raw, gone), send), deadline_s)
        return reply

    async def get(self, path: str) -> Reply:
        return await self.call(path, method="GET")

    async def until(self, predicate: Callable[[dict], bool], deadline_s: float = 10.0) -> dict:
        """Wait (bounded) until predicate(/stats) holds; fail if it never does."""
        for _ in range(int(deadline_s / 0.005)):
            stats = self.hub.stats()
            if predicate(stats):
                return stats
            await asyncio.sleep(0.005)
        raise AssertionError(f"condition not met within {deadline_s}s: {self.hub.stats()}")

    async def settle(self, deadline_s: float = 10.0) -> dict:
        """Wait (bounded) until the engine is idle and no stream is registered; return /stats."""
        stats = self.hub.stats()
        for _ in range(int(deadline_s / 0.01)):
            stats = self.hub.stats()
            if drained(stats):
                return stats
            await asyncio.sleep(0.01)
        return stats


@asynccontextmanager
async def running_service(config: ServiceConfig, loaded):
    app = create_app(config, loaded)
    async with app.router.lifespan_context(app) as state:
        yield Service(app, state)


def assert_clean(stats: dict) -> None:
    assert stats["blocks_free"] == stats["blocks_total"] and stats["blocks_reserved"] == 0, stats
    assert (stats["waiting"], stats["running"], stats["paused"], stats["streams_registered"]) == (0, 0, 0, 0), stats
    assert stats["double_release_attempts"] == 0, stats
