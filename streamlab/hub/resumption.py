"""What a server keeps so that a client can come back with Last-Event-ID: each stream's events
already taken (bounded by events and bytes), a completed stream's for the resume window after it
ended (its last events were written, not necessarily read: a client cut off before they arrived
gets them replayed), and why each recently ended stream can no longer be resumed (bounded by
--history, so a late resume gets 410, not 404). The hub owns the streams and
their windows (streamlab/hub/hub.py: attach, leave); this finds a stream to resume and what to replay,
or refuses before the first byte."""

from __future__ import annotations

import json

from streamlab.config import ResumeConfig
from streamlab.errors import ResumeGap, StreamGone, StreamNotFound
from streamlab.hub.streams import Stream, StreamEvent


class Resumption:
    def __init__(self, config: ResumeConfig, history: int) -> None:
        self.config = config
        self.history = history
        self.ended_streams: dict[str, str] = {}  # request id -> why it can no longer be resumed (oldest first)
        # request id -> (a completed stream, until when it can be replayed), oldest first: its
        # events were handed to a connection, which is not the client having read them.
        self.completed: dict[str, tuple[Stream, float]] = {}

    @property
    def on(self) -> bool:
        return self.config.on

    def keep(self, stream: Stream, event: StreamEvent) -> None:
        """An event taken by a reader stays replayable, within the buffer's events and bytes."""
        if not self.on:
            return
        event.size = len(json.dumps(event.payload))
        stream.sent.append(event)
        stream.sent_bytes += event.size
        while len(stream.sent) > self.config.buffer_events or stream.sent_bytes > self.config.buffer_bytes:
            stream.sent_bytes -= stream.sent.popleft().size

    def find(self, streams: dict[str, Stream], last_event_id: str, now: float) -> tuple[Stream, list[StreamEvent]]:
        """The stream "<request id>:<n>" names and the events after n it already handed out; or
        the refusal (a RequestError) that says why it cannot be resumed."""
        rid, _, n = last_event_id.strip().rpartition(":")
        if not self.on:
            raise StreamNotFound("this server does not resume streams (--resume-window 0)")
        if not rid or not n.isdigit():
            raise StreamNotFound(f"Last-Event-ID {last_event_id[:80]!r} is not '<request id>:<event number>'")
        self._forget_completed(now)
        stream = streams.get(rid) or self.completed.get(rid, (None, 0.0))[0]
        if stream is None:
            if rid in self.ended_streams:
                raise StreamGone(f"stream {rid} can no longer be resumed: {self.ended_streams[rid]}")
            raise StreamNotFound(f"no stream {rid} on this server")
        after = int(n)
        taken = stream.next_id - 1 - len(stream.queue)  # events handed to some connection so far
        if after > taken:
            raise StreamNotFound(f"stream {rid} never sent event {after}")
        if after == taken and stream.end_taken:
            raise StreamGone(f"stream {rid} can no longer be resumed: it completed and its last event was read")
        replay = [e for e in stream.sent if e.id > after]
        if after < taken and (not replay or replay[0].id != after + 1):
            raise ResumeGap(f"stream {rid} no longer keeps the events after {after} (the buffer holds "
                            f"{self.config.buffer_events} events or {self.config.buffer_bytes} bytes)")
        return stream, replay

    def ended(self, stream: Stream, reason: str, now: float) -> None:
        """A stream closed: remembered, so that a late resume is told why (410) rather than 404;
        a completed one stays replayable for the window."""
        if not self.on:
            return
        self.ended_streams[stream.request_id] = (
            f"it completed over {self.config.window_s:g} s ago (the resume window)" if stream.end_taken
            else f"closed: {reason}")
        if len(self.ended_streams) > self.history:
            del self.ended_streams[next(iter(self.ended_streams))]
        if stream.end_taken:
            self.completed[stream.request_id] = (stream, now + self.config.window_s)
        self._forget_completed(now)

    def replayed(self, stream: Stream, now: float) -> None:
        """A connection that resumed a completed stream ended: the client may have been cut off
        again before the tail arrived, so the window counts from now (found by the swarm: three
        reconnects 0.38 s apart outlasted a 1.16 s window counted from the stream's end)."""
        if self.completed.pop(stream.request_id, None) is not None:
            self.completed[stream.request_id] = (stream, now + self.config.window_s)

    def _forget_completed(self, now: float) -> None:
        """Completed streams past their window, and the oldest past --history, are forgotten."""
        while self.completed:
            rid, (_, until) = next(iter(self.completed.items()))
            if until > now and len(self.completed) <= self.history:
                break
            del self.completed[rid]
