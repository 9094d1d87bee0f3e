"""reader: reads every event as fast as it can, to the end."""

from __future__ import annotations

from typing import Literal

from harness.format.behaviours.base import BehaviourModel


class Reader(BehaviourModel):
    """Reads everything as fast as it can."""
    kind: Literal["reader"]

    async def read(self, client, conn, how):
        await client.read_all(conn)
        return conn
