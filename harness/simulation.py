"""The real hub and Starlette app on virtual time, behind a simulated ASGI server. No sockets.

The engine runs for real (so tokens, identity and releases are real); time advances by the
step-cost profile. The simulated connection models what the chapter measured: the server's
writes are accepted until about a quarter megabyte waits unread, then block; bytes arrive
after the group's latency at its bandwidth; a client's FIN or RST reaches the app as
`http.disconnect`, after which writes return silently (as uvicorn's do).
"""

from __future__ import annotations

import asyncio
import json
from collections import deque
from dataclasses import dataclass

from harness.profile import StepCostProfile
from streamlab.hub import Hub
from streamlab.sse import SSEEvent, SSEParser


@dataclass
class Head:
    status: int
    headers: dict[str, str]


class SimPipe:
    """Server-to-client bytes: a bounded buffer, a link of some bandwidth, and a latency."""

    def __init__(self, capacity: int, latency_s: float, rate_bytes_per_s: float | None) -> None:
        self.capacity = capacity
        self.latency_s = latency_s
        self.rate = rate_bytes_per_s
        self.chunks: deque[tuple[float, bytes]] = deque()  # (arrival time, bytes), in order
        self.buffered = 0
        self.link_free_at = 0.0
        self.space = asyncio.Event()
        self.arrived = asyncio.Event()
        self.eof_at: float | None = None

    def _now(self) -> float:
        return asyncio.get_running_loop().time()

    async def write(self, data: bytes, gone: asyncio.Event) -> None:
        while self.buffered and self.buffered + len(data) > self.capacity and not gone.is_set():
            self.space.clear()
            await _first(self.space.wait(), gone.wait())
        if gone.is_set():
            return
        now = self._now()
        start = max(now, self.link_free_at)
        done = start + (len(data) / self.rate if self.rate else 0.0)
        self.link_free_at = done
        arrival = done + self.latency_s
        self.buffered += len(data)
        self.chunks.append((arrival, data))
        asyncio.get_running_loop().call_at(arrival, self.arrived.set)

    def write_eof(self) -> None:
        self.eof_at = max(self._now(), self.link_free_at) + self.latency_s
        asyncio.get_running_loop().call_at(self.eof_at, self.arrived.set)

    async def read(self, max_bytes: int) -> bytes:
        """At least one byte that has arrived, up to max_bytes; b"" at end of stream."""
        while True:
            now = self._now()
            if self.chunks and self.chunks[0][0] <= now:
                out = bytearray()
                while self.chunks and self.chunks[0][0] <= now and len(out) < max_bytes:
                    arrival, data = self.chunks.popleft()
                    take = data[:max_bytes - len(out)]
                    out += take
                    if len(take) < len(data):
                        self.chunks.appendleft((arrival, data[len(take):]))
                self.buffered -= len(out)
                self.space.set()
                return bytes(out)
            if not self.chunks and self.eof_at is not None and self.eof_at <= now:
                return b""
            self.arrived.clear()
            await self.arrived.wait()


async def _first(*aws) -> None:
    tasks = [asyncio.ensure_future(a) for a in aws]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in tasks:
            t.cancel()


class SimConnection:
    """Both ends of one simulated HTTP exchange: the ASGI side for the app, the client side for a behaviour."""

    def __init__(self, capacity: int, latency_s: float, rate_bytes_per_s: float | None) -> None:
        self.pipe = SimPipe(capacity, latency_s, rate_bytes_per_s)
        self.latency_s = latency_s
        self.gone = asyncio.Event()
        self.head: Head | None = None
        self.head_ready = asyncio.Event()
        self.parser = SSEParser()
        self.body = bytearray()
        self.ended = False
        self.bytes_read = 0
        self.close_how: str | None = None

    # ---- the server's side (ASGI) ----

    async def serve(self, app, state: dict, method: str, path: str, body: bytes, headers: dict[str, str]) -> None:
        await asyncio.sleep(self.latency_s)  # the request's trip to the server
        if self.gone.is_set():
            return
        scope = {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"}, "http_version": "1.1",
                 "method": method, "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"",
                 "root_path": "", "headers": [(k.encode(), v.encode()) for k, v in headers.items()],
                 "client": ("127.0.0.1", 40000), "server": ("127.0.0.1", 8000), "state": dict(state)}
        sent_body = False

        async def receive():
            nonlocal sent_body
            if not sent_body:
                sent_body = True
                return {"type": "http.request", "body": body, "more_body": False}
            await self.gone.wait()
            return {"type": "http.disconnect"}

        async def send(message):
            if self.gone.is_set():
                return  # like uvicorn: writes after a disconnect return silently
            if message["type"] == "http.response.start":
                head = Head(message["status"], {k.decode().lower(): v.decode() for k, v in message["headers"]})
                asyncio.get_running_loop().call_later(self.latency_s, self._deliver_head, head)
                return
            chunk = message.get("body", b"")
            if chunk:
                await self.pipe.write(chunk, self.gone)
            if not message.get("more_body", False):
                self.pipe.write_eof()

        await app(scope, receive, send)

    def _deliver_head(self, head: Head) -> None:
        self.head = head
        self.head_ready.set()

    # ---- the client's side (harness.clients.Connection) ----

    async def read_head(self, timeout_s: float = 30.0) -> Head:
        await asyncio.wait_for(self.head_ready.wait(), timeout_s)
        return self.head

    async def read_chunk(self, max_bytes: int, timeout_s: float = 30.0) -> list[SSEEvent]:
        await self.read_head(timeout_s)
        data = await asyncio.wait_for(self.pipe.read(max_bytes), timeout_s)
        if not data:
            self.ended = True
            return self.parser.close()
        self.bytes_read += len(data)
        self.body += data
        return self.parser.feed(data)

    async def read_events(self, count: int | None = None, timeout_s: float = 30.0) -> list[SSEEvent]:
        got: list[SSEEvent] = []
        while not self.ended and (count is None or len(got) < count):
            got.extend(await self.read_chunk(65536, timeout_s))
        return got

    async def read_json(self, timeout_s: float = 30.0) -> dict:
        while not self.ended:
            await self.read_chunk(65536, timeout_s)
        return json.loads(self.body)

    def close(self, how: str = "fin") -> None:
        if self.close_how is None:
            self.close_how = how
            self.gone.set()


async def drive(hub: Hub, profile: StepCostProfile) -> None:
    """The simulation's step loop: the hub's own, with virtual time for the compute."""
    wake = asyncio.Event()
    hub.on_wish = wake.set
    try:
        while True:
            wake.clear()
            if not hub.engine.has_work():
                await wake.wait()
                continue
            out = hub.engine.step()
            await asyncio.sleep(profile.step_cost(out))
            now = hub.complete_step(out)
            await hub.deliver(out, now)
    except Exception as exc:  # as the hub's own thread does: a broken engine ends every stream, loudly
        hub.failure = exc
        hub.end_all("internal_error")
