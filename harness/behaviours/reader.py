"""reader: reads every event as fast as it can, to the end."""

from __future__ import annotations

from typing import Literal

from harness.behaviours.base import READ_DEADLINE_S, BehaviourModel


class Reader(BehaviourModel):
    """Reads everything as fast as it can."""
    kind: Literal["reader"]

    async def read(self, client, conn, how):
        while not conn.ended:
            client.note(await conn.read_events(1, READ_DEADLINE_S))
        return conn
