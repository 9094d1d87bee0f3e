"""reconnector: leaves mid-stream (or is cut off), comes back with Last-Event-ID, reads on."""

from __future__ import annotations

import asyncio
from typing import ClassVar, Literal

from pydantic import Field

from harness.format.behaviours.base import READ_DEADLINE_S, BehaviourModel


class Reconnector(BehaviourModel):
    """Leaves after `after_tokens` tokens on each connection (or when its connection breaks), waits
    gap_s, and reconnects with the last event id it saw (Last-Event-ID), up to `reconnects` times;
    then reads to the end. A failed reconnect (refused, or no connection) also uses one."""
    kind: Literal["reconnector"]
    after_tokens: int | tuple[int, int] | None = Field(8, description="None: leave only when the connection breaks")
    close: Literal["fin", "rst", "mixed"] = "fin"
    gap_s: float = Field(0.2, ge=0)
    reconnects: int = Field(1, ge=1, le=50)
    resumes: ClassVar[bool] = True
    waits_for_end: ClassVar[bool] = True
    may_be_dropped_slow: ClassVar[bool] = True

    @property
    def close_mode(self) -> str:
        return self.close

    @property
    def ours_only(self) -> str | None:
        return "resumes by Last-Event-ID (our server's resumption)"

    async def read(self, client, conn, how):
        """Read; leave after N tokens or on a break; come back with Last-Event-ID; until the end."""
        rec, wire = client.record, client.wire
        left = self.reconnects
        while True:
            after = self.after_tokens
            limit = None if after is None or left == 0 else (
                client.rng.randint(*after) if isinstance(after, tuple) else after)
            start = len(rec.token_times)
            try:
                while not conn.ended and (limit is None or len(rec.token_times) - start < limit):
                    client.note(await conn.read_events(1, READ_DEADLINE_S), conn)
            except (OSError, ConnectionError, asyncio.IncompleteReadError):
                if left == 0:
                    raise
            if conn.ended and rec.finish is not None:
                return conn
            rec.cuts.append(client.clock())
            rec.bytes_read += conn.bytes_read
            conn.close(client.close_how())
            while left > 0:  # come back; a refused or failed reconnect uses one attempt too
                left -= 1
                await asyncio.sleep(self.gap_s)
                try:
                    conn = await client.open_connection(wire.path, wire.body(rec.prompt, rec.request),
                                                        {"last-event-id": rec.event_ids[-1]} if rec.event_ids else None)
                except (OSError, ConnectionError, asyncio.TimeoutError):
                    rec.resumes.append(0)
                    continue
                try:
                    head = await conn.read_head(READ_DEADLINE_S)
                except (OSError, ConnectionError, asyncio.TimeoutError):
                    conn.close("fin")
                    rec.resumes.append(0)
                    continue
                rec.resumes.append(head.status)
                if head.status == 200:
                    break
                rec.error_type = wire.error_type(await client.reply(conn))
                conn.close("fin")
            else:
                rec.failure = f"could not resume: statuses {rec.resumes}"
                return conn
