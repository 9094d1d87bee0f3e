"""The responses that wait on a hub stream: SSE, OpenAI chunks, and a non-streaming route's
collected answer. Cleanup is a `finally` around the response's own __call__.

Not the body generator's `finally`: a generator that never started never runs it, and one
paused at `yield` when the client leaves runs it only when garbage-collected.

Disconnect detection depends on the ASGI spec version the server announces. uvicorn 0.54
(and every release since 0.13) announces "spec_version": "2.3" for HTTP, so Starlette's
StreamingResponse runs a task that listens for `http.disconnect` and cancels the body as
soon as the client leaves. Under 2.4 Starlette would only learn of it from a failing write,
and uvicorn's send() returns silently after a disconnect instead of raising: such a
response never learns. WriteOnlyStreamingResponse is exactly that path, for the lab.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable

from starlette.responses import Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from streamlab.guard import CONNECTION_LOST
from streamlab.hub import Hub
from streamlab.hub.streams import Stream, StreamEvent
from streamlab.openai_api import ChunkWriter
from streamlab.sse import encode_comment, encode_json_event

KEEPALIVE = encode_comment("keep-alive") + b"\n"


async def sse_body(hub: Hub, stream: Stream, keepalive_s: float, padding: int, replay: list[StreamEvent] = (),
                   retry_ms: int | None = None, written_at: bool = False) -> AsyncIterator[bytes]:
    """Events are formatted as they are written, so a queue holds small records, not bytes. Each
    id is "<request id>:<n>", what a reconnect sends back as Last-Event-ID; a resumable stream's
    first event on each connection carries `retry:`, how long a browser waits to reconnect.
    written_at (the null model's streams): each token also carries the server's wall clock as it
    is formatted, just before the write, so a harness on the same machine can bound how far its
    recorded times are from the bytes' arrival (benchmarks/harness_capacity.py)."""
    async for event in hub.events(stream, keepalive_s, replay):
        if event is None:
            yield KEEPALIVE
            continue
        payload = {**event.payload, "written_at": time.time()} if written_at and event.kind == "token" else event.payload
        data = encode_json_event(event.kind, payload, f"{stream.request_id}:{event.id}",
                                 padding if event.kind == "token" else 0, retry_ms)
        hub.books.bytes_out += len(data)
        yield data
        retry_ms = None


async def openai_body(hub: Hub, stream: Stream, keepalive_s: float, writer: ChunkWriter,
                      prompt_ids: list[int]) -> AsyncIterator[bytes]:
    """The same events as OpenAI chunks: no event names or ids, `data: [DONE]` at the end."""
    async for event in hub.events(stream, keepalive_s):
        if event is None:
            yield KEEPALIVE
        elif event.kind == "start":
            opening = writer.start(prompt_ids)
            if opening:
                yield opening
        elif event.kind == "token":
            yield writer.token(event.payload)
        elif event.kind == "done":
            yield writer.done(event.payload)
        elif event.kind == "error":
            yield writer.error(event.payload)


class HubStreamingResponse(StreamingResponse):
    """Streams one hub stream's events, encoded by `body`; every way it ends closes the stream once."""
    media_type = "text/event-stream"
    hears_disconnect = True  # the lab's write-only response does not: it never learns (its negative control)

    def __init__(self, hub: Hub, stream: Stream, body: AsyncIterator[bytes], resumable: bool = False) -> None:
        super().__init__(body, headers={
            "X-Request-ID": stream.request_id, "Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        self.hub = hub
        self.stream = stream
        self.resumable = resumable
        self.attachment = stream.attachment  # this connection's claim on the stream

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.hears_disconnect and CONNECTION_LOST in scope:  # this connection's, while it owns the stream
            self.stream.connection_lost = scope[CONNECTION_LOST]
        try:
            await self.serve(scope, receive, send)
        finally:
            if self.stream.end_taken:
                self.hub.close(self.stream, "finished")
            else:  # the client left first: closed now, or kept for a reconnect (resumption)
                self.hub.leave(self.stream, self.attachment, self.resumable)

    async def serve(self, scope: Scope, receive: Receive, send: Send) -> None:
        await super().__call__(scope, receive, send)


class WriteOnlyStreamingResponse(HubStreamingResponse):
    """Lab only: writes and never listens for the disconnect (Starlette's 2.4 path without a failing write)."""
    hears_disconnect = False

    async def serve(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.stream_response(send)


class CollectedResponse(StreamingResponse):
    """A non-streaming route's answer: one hub stream's events collected while Starlette's own
    `listen_for_disconnect` (inherited, as HubStreamingResponse's) watches for the client leaving,
    then `render(events)` sent whole; a client gone first gets 499 and nothing is rendered. The
    stream is closed once either way, before a byte is sent."""

    def __init__(self, hub: Hub, stream: Stream, render: Callable[[list[StreamEvent]], Response]) -> None:
        # Not StreamingResponse.__init__: there is no body iterator, the rendered response is the answer.
        self.hub = hub
        self.stream = stream
        self.render = render
        self.background = None

    async def _collect(self) -> list[StreamEvent]:
        return [e async for e in self.hub.events(self.stream, keepalive_s=3600) if e is not None]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        collector = asyncio.ensure_future(self._collect())
        listener = asyncio.ensure_future(self.listen_for_disconnect(receive))
        try:
            done, _ = await asyncio.wait({collector, listener}, return_when=asyncio.FIRST_COMPLETED)
        finally:  # also when this task is cancelled: neither helper task outlives the response
            listener.cancel()
            if not collector.done():
                collector.cancel()
            self.hub.close(self.stream, "finished" if self.stream.end_taken else "client_gone")
        answer = self.render(collector.result()) if collector in done else Response(status_code=499)
        await answer(scope, receive, send)
