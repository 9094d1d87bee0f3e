"""reader: reads every event as fast as it can, to the end."""

from __future__ import annotations

from typing import ClassVar, Literal

from harness.format.behaviours.base import BehaviourModel


class Reader(BehaviourModel):
    """Reads everything as fast as it can."""
    kind: Literal["reader"]
    waits_for_end: ClassVar[bool] = True
    reads_at_full_speed: ClassVar[bool] = True

    async def read(self, client, conn, how):
        await client.read_all(conn)
        return conn
