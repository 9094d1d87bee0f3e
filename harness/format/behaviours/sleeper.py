"""sleeper: a slow reader that takes a chunk of the socket, then sleeps, repeatedly."""

from __future__ import annotations

import asyncio
from typing import ClassVar, Literal

from pydantic import Field

from harness.format.behaviours.base import READ_DEADLINE_S, BehaviourModel


class Sleeper(BehaviourModel):
    """Reads a chunk (up to read_bytes from the socket), then sleeps sleep_s, repeatedly."""
    kind: Literal["sleeper"]
    read_bytes: int = Field(65536, ge=1)
    sleep_s: float = Field(0.25, gt=0)
    recv_buffer_bytes: int | None = Field(None, ge=1024, description="live: SO_RCVBUF, so backpressure reaches the server")
    waits_for_end: ClassVar[bool] = True
    may_be_dropped_slow: ClassVar[bool] = True

    @property
    def socket_rcvbuf(self) -> int | None:
        return self.recv_buffer_bytes

    @property
    def slows_others(self) -> bool:
        return True

    async def read(self, client, conn, how):
        while not conn.ended:
            client.note(await conn.read_chunk(self.read_bytes, READ_DEADLINE_S), conn)
            if not conn.ended:
                await asyncio.sleep(self.sleep_s)
        return conn
