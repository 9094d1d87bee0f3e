"""stalled: sends its request and never reads, not even the head; leaves after give_up_s."""

from __future__ import annotations

import asyncio
from typing import ClassVar, Literal

from pydantic import Field

from harness.format.behaviours.base import BehaviourModel


class Stalled(BehaviourModel):
    """Connects, sends its request, never reads; leaves after give_up_s."""
    kind: Literal["stalled"]
    give_up_s: float = Field(5.0, gt=0)
    close: Literal["fin", "rst"] = "fin"
    before_head: ClassVar[bool] = True
    leaves_early: ClassVar[bool] = True

    @property
    def close_mode(self) -> str:
        return self.close

    @property
    def slows_others(self) -> bool:
        return True

    async def read(self, client, conn, how):
        await asyncio.sleep(self.give_up_s)  # never reads, not even the head
        client.close(conn, how)
        return conn
