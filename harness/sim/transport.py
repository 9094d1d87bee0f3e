"""The simulated link between a client and the server: a pipe of bytes that arrive after the
group's latency at its bandwidth, whose writes block past the unread buffer the profile gives,
and the server's one core that the connections' reads and writes share. No sockets.
"""

from __future__ import annotations

import asyncio
import json
from collections import deque

from harness.sim.asgi import http_scope, request_receive
from harness.clients.rawhttp import Head
from harness.format.scenario import GroupSpec
from harness.format.toxics import BandwidthToxic, LatencyToxic

from streamlab.sse import SSEEvent, SSEParser


class SimPipe:
    """Server-to-client bytes: a bounded buffer, a link of some bandwidth, and a latency."""

    def __init__(self, capacity: int, latency_s: float, rate_bytes_per_s: float | None,
                 read_window: int | None = None) -> None:
        self.capacity = capacity
        self.read_window = read_window  # the most one read takes: what the client's receive buffer holds
        self.latency_s = latency_s
        self.rate = rate_bytes_per_s
        self.chunks: deque[tuple[float, bytes]] = deque()  # (arrival time, bytes), in order
        self.buffered = 0
        self.link_free_at = 0.0
        self.space = asyncio.Event()
        self.arrived = asyncio.Event()
        self.eof_at: float | None = None
        self.last_arrival = 0.0  # when the last read's last bytes arrived (a kernel's receive stamp, live)
        # After a read the receive buffer's window limited, the bytes left behind it were still the
        # sender's: they reach the client's socket only as that read frees room (a live socket's
        # stamp on them is after that read), however early the link delivered them here.
        self.held_until = 0.0

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
        """At least one byte that has arrived, up to max_bytes and the read window; b"" at end of stream."""
        window_limits = self.read_window is not None and self.read_window <= max_bytes
        max_bytes = min(max_bytes, self.read_window or max_bytes)
        while True:
            now = self._now()
            if self.chunks and self.chunks[0][0] <= now:
                out = bytearray()
                while self.chunks and self.chunks[0][0] <= now and len(out) < max_bytes:
                    arrival, data = self.chunks.popleft()
                    self.last_arrival = min(max(arrival, self.held_until), now)
                    take = data[:max_bytes - len(out)]
                    out += take
                    if len(take) < len(data):
                        self.chunks.appendleft((arrival, data[len(take):]))
                left_behind = window_limits and len(out) >= max_bytes and self.chunks and self.chunks[0][0] <= now
                self.held_until = now + self.latency_s if left_behind else 0.0
                self.buffered -= len(out)
                self.space.set()
                return bytes(out)
            if not self.chunks and self.eof_at is not None and self.eof_at <= now:
                self.last_arrival = min(max(self.eof_at, self.held_until), now)
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

    def __init__(self, capacity: int, latency_s: float, rate_bytes_per_s: float | None,
                 core: ServerCore | None = None, per_request_s: float = 0.0, request_latency_s: float = 0.0,
                 read_window: int | None = None, up_latency_s: float = 0.0,
                 server_idle=lambda: True, per_byte_s: float = 0.0, client_per_byte_s: float = 0.0) -> None:
        self.pipe = SimPipe(capacity, latency_s, rate_bytes_per_s, read_window)
        self.core, self.per_request_s, self.request_latency_s = core, per_request_s, request_latency_s
        self.per_byte_s, self.client_per_byte_s = per_byte_s, client_per_byte_s
        self.latency_s, self.up_latency_s = latency_s, up_latency_s
        self.server_idle = server_idle
        self.gone = asyncio.Event()
        self.head: Head | None = None
        self.head_at = 0.0  # loop time the head arrived
        self.head_ready = asyncio.Event()
        self.parser = SSEParser()
        self.body = bytearray()
        self.ended = False
        self.bytes_read = 0
        self.close_how: str | None = None

    # ---- the server's side (ASGI) ----

    async def serve(self, app, state: dict, method: str, path: str, body: bytes, headers: dict[str, str]) -> None:
        await asyncio.sleep(self.up_latency_s)  # the request's trip to the server (a downstream toxic does not delay it)
        if self.server_idle():  # an idle server wakes up for it: its loop, the step thread (calibrated on lone requests)
            await asyncio.sleep(self.request_latency_s)
        if self.core is not None and self.per_request_s:  # HTTP, JSON, tokenizing: on the server's one core
            await self.core.spend(self.per_request_s)
        if self.gone.is_set():
            return
        async def send(message):
            if self.gone.is_set():
                return  # like uvicorn: writes after a disconnect return silently
            if message["type"] == "http.response.start":
                head = Head(message["status"], {k.decode().lower(): v.decode() for k, v in message["headers"]})
                asyncio.get_running_loop().call_later(self.latency_s, self._deliver_head, head)
                return
            chunk = message.get("body", b"")
            if chunk:
                if self.core is not None and self.per_byte_s:  # the write's bytes: on the server's one core
                    await self.core.spend(self.per_byte_s * len(chunk))
                await self.pipe.write(chunk, self.gone)
            if not message.get("more_body", False):
                self.pipe.write_eof()

        await app(http_scope(method, path, headers, state), request_receive(body, self.gone), send)

    def _deliver_head(self, head: Head) -> None:
        self.head, self.head_at = head, asyncio.get_running_loop().time()
        self.head_ready.set()

    # ---- the client's side (harness.clients.client.Connection) ----

    async def read_head(self, timeout_s: float = 30.0) -> Head:
        await asyncio.wait_for(self.head_ready.wait(), timeout_s)
        return self.head

    async def read_chunk(self, max_bytes: int, timeout_s: float = 30.0) -> list[SSEEvent]:
        await self.read_head(timeout_s)
        data = await asyncio.wait_for(self.pipe.read(max_bytes), timeout_s)
        if not data:
            self.ended = True
            return self.parser.close()
        if self.core is not None and self.client_per_byte_s:  # the client's copy and parse: on the same cores, when it reads
            await self.core.share(self.client_per_byte_s * len(data))
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

    def arrived_ago(self) -> float:
        """As a live socket's kernel stamp: since the last read's last bytes arrived (the head's
        delivery before any body was read), not since this client got round to reading them."""
        arrived = self.pipe.last_arrival if self.bytes_read or self.ended else self.head_at
        return max(0.0, asyncio.get_running_loop().time() - arrived)

    def close(self, how: str = "fin") -> None:
        if self.close_how is None:
            self.close_how = how
            self.gone.set()


class ServerCore:
    """The live server's one core (its event loop and step thread share one GIL): work queues for it."""

    def __init__(self) -> None:
        self.busy_until = 0.0

    def take(self, seconds: float) -> float:
        """Queue `seconds` of work from now; returns when it is done."""
        start = max(asyncio.get_running_loop().time(), self.busy_until)
        self.busy_until = start + seconds
        return self.busy_until

    async def spend(self, seconds: float) -> None:
        """Queue `seconds` of work and wait until it is done."""
        await asyncio.sleep(max(0.0, self.take(seconds) - asyncio.get_running_loop().time()))

    async def share(self, seconds: float) -> None:
        """Another process's `seconds` of work on the same cores (a client's read): the server's queue
        waits for it, but it does not wait for the server's queue, since the OS gives it its share
        at once. Queued behind the server's work, a healthy reader's first token waited for a slow
        reader's 256 KiB writes: live/sim TTFT 0.52-0.55 on slow_reader_pause_4."""
        self.take(seconds)
        await asyncio.sleep(seconds)


def sim_network(group: GroupSpec) -> tuple[float, float | None, float]:
    """(downstream latency s, downstream bandwidth bytes/s, upstream latency s) for the simulated
    link; other toxics are live-only."""
    latency, rate, up = 0.0, None, 0.0
    for toxic in (group.network.toxics if group.network else []):
        if isinstance(toxic, LatencyToxic):
            if toxic.stream == "downstream":
                latency += toxic.latency_ms / 1e3
            else:
                up += toxic.latency_ms / 1e3
        elif isinstance(toxic, BandwidthToxic) and toxic.stream == "downstream":
            rate = toxic.rate_kbps * 1024.0
    return latency, rate, up
