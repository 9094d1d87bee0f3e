"""dropper: leaves early, with FIN or RST: after N tokens, after some seconds, or while waiting."""

from __future__ import annotations

import asyncio
from typing import ClassVar, Literal

from pydantic import Field, model_validator

from harness.format.behaviours.base import READ_DEADLINE_S, BehaviourModel


class Dropper(BehaviourModel):
    """Leaves after `after_tokens` tokens (a number or [min, max]), after `after_s` seconds, or while waiting for a slot."""
    kind: Literal["dropper"]
    after_tokens: int | tuple[int, int] | None = None
    after_s: float | None = Field(None, ge=0)
    while_waiting: bool = False
    close: Literal["fin", "rst", "mixed"] = "fin"
    read_pause_s: float = Field(0.0, ge=0, description="sleep between reads: a slow reader that leaves early")
    recv_buffer_bytes: int | None = Field(None, ge=1024, description="live: SO_RCVBUF, so a slow leaver's "
                                                                     "backpressure reaches the server")
    linger_s: float = Field(0.0, ge=0, description="after its last read it stops reading this long before it "
                                                   "hangs up (a tab put away, then closed): backpressure meanwhile")
    leaves_early: ClassVar[bool] = True

    @property
    def socket_rcvbuf(self) -> int | None:
        return self.recv_buffer_bytes

    @property
    def close_mode(self) -> str:
        return self.close

    @property
    def slows_others(self) -> bool:
        return self.read_pause_s > 0

    @model_validator(mode="after")
    def _one_trigger(self) -> "Dropper":
        given = [self.after_tokens is not None, self.after_s is not None, self.while_waiting]
        if sum(given) != 1:
            raise ValueError("give exactly one of after_tokens, after_s, while_waiting")
        return self

    async def read(self, client, conn, how):
        rec = client.record
        if self.while_waiting:
            while rec.start_at is None and not conn.ended:
                client.note(await conn.read_events(1, READ_DEADLINE_S), conn)
        elif self.after_s is not None:
            try:
                await asyncio.wait_for(client.read_all(conn), self.after_s)
            except asyncio.TimeoutError:
                pass
        else:
            after = self.after_tokens
            limit = client.rng.randint(*after) if isinstance(after, tuple) else after
            while len(rec.token_times) < limit and not conn.ended:
                client.note(await conn.read_events(1, READ_DEADLINE_S), conn)
                if self.read_pause_s and len(rec.token_times) < limit:
                    await asyncio.sleep(self.read_pause_s)
        if self.linger_s and not conn.ended:
            await asyncio.sleep(self.linger_s)
        if not conn.ended or rec.finish is None:
            client.close(conn, how)
        return conn
