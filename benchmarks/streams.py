"""Streaming clients that time every token, for our server and for an OpenAI-style peer.

One client per stream, each on its own raw socket (harness.rawhttp), all in one asyncio
process. A stream's clock starts just before its connection opens; TTFT is the arrival of
its first token event, a gap is the time between two token events as the client read them.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field

from harness.rawhttp import RawExchange

STREAM_DEADLINE_S = 300.0


@dataclass
class TimedStream:
    prompt_index: int
    sent_at: float
    token_times: list[float] = field(default_factory=list)
    token_ids: list[int] = field(default_factory=list)  # ours only: the peer sends text
    text: str = ""
    finish_reason: str | None = None
    completion_tokens: int | None = None  # as the server reported it

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
    """Where a server takes a streaming request, and how its events carry tokens."""
    name: str
    path: str
    model: str | None = None  # the peer's model name (its folder)

    def body(self, prompt: str, max_tokens: int) -> dict:
        if self.name == "streamlab":
            return {"prompt": prompt, "max_new_tokens": max_tokens, "ignore_eos": True}
        # The peer: OpenAI completions, greedy. It refuses `ignore_eos`; an eos_token_id of -1 in
        # its per-request generation config is its own way of saying the same.
        return {"model": self.model, "prompt": prompt, "max_tokens": max_tokens, "stream": True,
                "temperature": 0, "generation_config": json.dumps({"do_sample": False, "eos_token_id": -1})}

    def take(self, data: str, event: str | None, stream: TimedStream, now: float) -> None:
        if self.name == "streamlab":
            if event == "token":
                payload = json.loads(data)
                stream.token_times.append(now)
                stream.token_ids.append(payload["token_id"])
                stream.text += payload["text"]
            elif event == "done":
                payload = json.loads(data)
                stream.finish_reason = payload["finish_reason"]
                stream.completion_tokens = payload["usage"]["completion_tokens"]
            elif event == "error":
                raise RuntimeError(f"stream ended with an error: {data}")
            return
        if data.strip() == "[DONE]":
            return
        payload = json.loads(data)
        choice = payload["choices"][0]
        if choice.get("finish_reason"):
            stream.finish_reason = choice["finish_reason"]
            stream.completion_tokens = (payload.get("usage") or {}).get("completion_tokens")
            if choice.get("text"):
                stream.text += choice["text"]
            return
        # One event per generated token, text possibly empty (a partial character).
        stream.token_times.append(now)
        stream.text += choice.get("text", "")


STREAMLAB = Api("streamlab", "/v1/stream")


def peer_api(model: str) -> Api:
    return Api("peer", "/v1/completions", model)


async def timed_stream(api: Api, port: int, prompt_index: int, prompt: str, max_tokens: int,
                       started: asyncio.Event | None = None) -> TimedStream:
    """One stream read to its end; `started` is set when its first token arrives."""
    stream = TimedStream(prompt_index, time.monotonic())
    ex = await RawExchange.open("127.0.0.1", port, "POST", api.path, api.body(prompt, max_tokens))
    try:
        head = await ex.read_head(STREAM_DEADLINE_S)
        if head.status != 200:
            raise RuntimeError(f"{api.name} refused the stream: {head.status} {bytes(ex.body)[:300]!r}")
        deadline = time.monotonic() + STREAM_DEADLINE_S
        while not ex.ended:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{api.name} stream {prompt_index} not done within {STREAM_DEADLINE_S}s")
            for event in await ex.read_events(1, timeout_s=STREAM_DEADLINE_S):
                api.take(event.data, event.event, stream, time.monotonic())
            if started is not None and stream.token_times:
                started.set()
    finally:
        ex.close_fin()
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
