"""Streaming clients that time every token, for our server and for an OpenAI-style peer.

One client per stream, each on its own raw socket (harness.clients.rawhttp), all in one asyncio
process. A stream's clock starts just before its connection opens; TTFT is the arrival of
its first token event, a gap is the time between two token events as the client read them.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from harness.clients.rawhttp import RawExchange
from harness.record.trace import StreamRecord
from harness.clients.wire import StreamlabWire, Wire, wire_for
from streamlab.sse import SSEEvent

STREAM_DEADLINE_S = 300.0


@dataclass
class TimedStream:
    prompt_index: int
    sent_at: float
    token_times: list[float] = field(default_factory=list)
    token_ids: list[int] = field(default_factory=list)  # where the server sends them (ours, vLLM)
    text: str = ""
    finish_reason: str | None = None

    @property
    def ttft_s(self) -> float:
        return self.token_times[0] - self.sent_at

    @property
    def done_at(self) -> float:
        return self.token_times[-1]

    @property
    def gaps_s(self) -> list[float]:
        return [b - a for a, b in zip(self.token_times, self.token_times[1:])]


@dataclass(frozen=True)
class Api:
    """A server's streaming route, spoken through the harness's wire for it (harness.clients.wire): the
    same request body and event reading as a scenario's clients, so a peer is asked exactly what
    a target run asks it. Greedy, with the end of text switched off."""
    name: str
    wire: Wire

    @property
    def path(self) -> str:
        return self.wire.path

    def body(self, prompt: str, max_tokens: int) -> dict:
        return self.wire.body(prompt, {"max_new_tokens": max_tokens, "temperature": 0.0, "top_k": 0, "top_p": 1.0,
                                       "seed": None, "stop": [], "ignore_eos": True})

    def take(self, event: SSEEvent, record: StreamRecord, now: float) -> None:
        self.wire.note(record, event, now)
        if record.finish is not None and record.finish not in FINISHED:
            raise RuntimeError(f"{self.name}: the stream ended with {record.finish!r}")


# How a stream may end (ours and OpenAI's words); anything else is an error event's type. A
# stream that stopped short is caught by its token count.
FINISHED = {"length", "stop"}

STREAMLAB = Api("streamlab", StreamlabWire())


def peer_api(target: str, model: str) -> Api:
    """A peer's completions route, as its target profile says to ask it (harness.format.target)."""
    from harness.format.target import TARGETS

    profile = TARGETS[target].profile_spec
    return Api(target, wire_for(TARGETS[target].api, model, profile.request_extra, profile.ignore_eos))


async def timed_stream(api: Api, port: int, prompt_index: int, prompt: str, max_tokens: int,
                       started: asyncio.Event | None = None) -> TimedStream:
    """One stream read to its end; `started` is set when its first token arrives."""
    stream = TimedStream(prompt_index, time.monotonic())
    record = StreamRecord("bench", prompt_index, "fast", prompt, {})
    ex = await RawExchange.open("127.0.0.1", port, "POST", api.path, api.body(prompt, max_tokens),
                                headers=api.wire.headers)
    try:
        head = await ex.read_head(STREAM_DEADLINE_S)
        if head.status != 200:
            raise RuntimeError(f"{api.name} refused the stream: {head.status} {bytes(ex.body)[:300]!r}")
        deadline = time.monotonic() + STREAM_DEADLINE_S
        while not ex.ended:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{api.name} stream {prompt_index} not done within {STREAM_DEADLINE_S}s")
            for event in await ex.read_events(1, timeout_s=STREAM_DEADLINE_S):
                api.take(event, record, time.monotonic())
            if started is not None and record.token_times:
                started.set()
    finally:
        ex.close_fin()
    stream.token_times, stream.token_ids, stream.text = record.token_times, record.token_ids, record.text
    stream.finish_reason = record.finish
    if len(stream.token_times) != max_tokens:
        raise RuntimeError(f"{api.name} stream {prompt_index}: {len(stream.token_times)} tokens, "
                           f"expected {max_tokens} (finish {stream.finish_reason})")
    return stream


async def burst(api: Api, port: int, prompts: list[str], max_tokens: int) -> tuple[float, list[TimedStream]]:
    """All prompts sent at once, each on its own connection: (makespan_s, streams).

    The makespan runs from the first request sent to the last stream's last token."""
    start = time.monotonic()
    streams = await asyncio.gather(*(timed_stream(api, port, i, p, max_tokens) for i, p in enumerate(prompts)))
    return max(s.done_at for s in streams) - start, list(streams)
