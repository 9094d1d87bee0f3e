"""Delivery: a step's output turned into each stream's events, and the events read out in order.

Runs on the event loop thread. The hub (streamlab/hub/hub.py) owns the map of open streams and
the one close; this part only appends to a stream's queue and hands events to its response.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING

from streamlab.engine.outputs import StepOutput
from streamlab.engine.sequence import FinishReason
from streamlab.hub.books import HubBooks
from streamlab.hub.resumption import Resumption
from streamlab.hub.step_clock import Clock
from streamlab.hub.streams import Stream, StreamEvent

if TYPE_CHECKING:
    import threading


class Delivery:
    """Mixed into the Hub; the attributes below are the hub's, read here."""
    _streams: dict[str, Stream]
    books: HubBooks
    resumption: Resumption
    clock: Clock
    _stopping: threading.Event

    _apply_backpressure: Callable[[Stream], None]  # streamlab/hub/backpressure.py

    def _push(self, stream: Stream, kind: str, payload: dict) -> None:
        stream.queue.append(StreamEvent(kind, payload, stream.next_id))
        stream.next_id += 1

    async def events(self, stream: Stream, keepalive_s: float,
                     replay: list[StreamEvent] = ()) -> AsyncIterator[StreamEvent | None]:
        """The stream's events in order, ending with done or error; None means 'send a keep-alive'.
        A resumed connection first gets `replay`; it stops as soon as another connection takes over."""
        attachment = stream.attachment
        for event in replay:
            stream.writing_since = self.clock()
            yield event
            stream.written(self.clock())
        while stream.attachment == attachment:
            if stream.connection_lost():
                return  # the response's close follows: nothing taken for a client that is gone
            if stream.queue:
                event = stream.queue.popleft()
                stream.taken.set()
                self.resumption.keep(stream, event)
                if event.kind in ("done", "error"):
                    stream.end_taken = True
                    yield event
                    return
                self._apply_backpressure(stream)
                stream.writing_since = self.clock()
                yield event
                stream.written(self.clock())
                continue
            if stream.closed or stream.end_taken:
                return
            stream.wakeup.clear()
            try:
                await asyncio.wait_for(stream.wakeup.wait(), keepalive_s)
            except TimeoutError:
                yield None


    def _deliver(self, out: StepOutput, released_at: float) -> list[Stream]:
        """Event loop thread: turn one step's output into stream events. Returns the streams touched."""
        touched: dict[str, Stream] = {}
        for tok in out.tokens:
            stream = self._streams.get(tok.request_id)
            if stream is None or stream.finished:
                self.books.counters["late_events_dropped"] += 1
                continue
            index, text = tok.index, stream.text.deltas[tok.index]
            if self.defect:  # lab only (streamlab/defects.py)
                index += self.defect == "skipped_event_index" and tok.index >= 3
                text = "" if self.defect == "dropped_text_delta" and tok.index == 2 else text
            self._push(stream, "token", {"index": index, "token_id": tok.token_id, "text": text})
            stream.completion_tokens += 1
            touched[stream.request_id] = stream
        for fin in out.finished:
            stream = self._streams.get(fin.request_id)
            if stream is None or stream.finished:
                self.books.counters["late_events_dropped"] += 1
                continue
            if fin.reason is FinishReason.CANCELLED:  # cancelled by no one the hub knows: say so
                self._push(stream, "error", {"error": {"type": "cancelled", "message": "the request was cancelled"}})
            elif fin.reason is FinishReason.ERROR:  # its step failed; the server goes on
                self.books.cancelled("internal_error")
                self._push(stream, "error", {"error": {"type": "internal_error",
                                                       "message": "the engine failed in the step this request was in"}})
            else:
                tail = stream.text.flush()
                if tail and stream.queue and stream.queue[-1].kind == "token":
                    stream.queue[-1].payload["text"] += tail
                completion = fin.completion_tokens
                completion -= self.defect == "usage_off_by_one" and completion > 3  # lab only
                self._push(stream, "done", {
                    "finish_reason": fin.reason.value,
                    "usage": {"prompt_tokens": stream.prompt_tokens, "completion_tokens": completion}})
            stream.finished = True
            touched[stream.request_id] = stream
        for stream in touched.values():
            stream.max_queued = max(stream.max_queued, len(stream.queue))
            self._apply_backpressure(stream)
            stream.wakeup.set()
        return list(touched.values())

    async def deliver_and_wait(self, out: StepOutput, released_at: float) -> None:
        """The naive policy: hand each stream its events and wait until its reader took them (the
        step thread runs it on the loop; the simulation awaits it after a Wait.READERS step)."""
        for stream in self._deliver(out, released_at):
            while stream.queue and not stream.closed and not self._stopping.is_set():
                stream.taken.clear()
                await stream.taken.wait()
