"""What every behaviour is: a model in the scenario format (its `kind` and its fields) that also
knows how its client reads a stream. harness/clients/client.py's Client runs the part every client
shares (the request, the head, the books kept on the record, leaving on purpose) and hands the
connection to the behaviour's read()."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from harness.format.strict import Strict

if TYPE_CHECKING:
    from harness.clients.client import Client, Connection

READ_DEADLINE_S = 120.0  # no single read waits longer than this


class BehaviourModel(Strict):
    before_head: ClassVar[bool] = False  # read() runs before the response head is read (it never reads it)

    async def read(self, client: "Client", conn: "Connection", how: str) -> "Connection":
        """Read the stream after a 200 head, as this behaviour does; the connection it ended on."""
        raise NotImplementedError
