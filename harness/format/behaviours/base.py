"""What every behaviour is: a model in the scenario format (its `kind` and its fields) that also
knows how its client reads a stream. harness/clients/client.py's Client runs the part every client
shares (the request, the head, the books kept on the record, leaving on purpose) and hands the
connection to the behaviour's read()."""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar, Protocol

from harness.format.strict import Strict
from streamlab.sse import SSEEvent

READ_DEADLINE_S = 120.0  # no single read waits longer than this


class Connection(Protocol):
    """One exchange as a client reads it, over either transport (harness.clients.rawhttp, the
    simulation's pipe). Declared here, below the clients, so that a behaviour's read() names it."""
    ended: bool
    bytes_read: int

    async def read_head(self, timeout_s: float = ...): ...
    async def read_events(self, count: int | None = None, timeout_s: float = ...) -> list[SSEEvent]: ...
    async def read_chunk(self, max_bytes: int, timeout_s: float = ...) -> list[SSEEvent]: ...
    async def read_json(self, timeout_s: float = ...) -> dict: ...
    def arrived_ago(self) -> float: ...  # seconds since the last read's bytes arrived
    def close(self, how: str = "fin") -> None: ...


class ClientSide(Protocol):
    """What a behaviour's read() uses of its client (harness.clients.client.Client)."""
    record: Any  # harness.record.trace.StreamRecord
    rng: random.Random
    clock: Callable[[], float]
    wire: Any  # harness.clients.wire.Wire
    open_connection: Callable[..., Awaitable[Connection]] | None

    def note(self, events: list[SSEEvent], conn: Connection) -> None: ...
    def arrived_at(self, conn: Connection) -> float: ...
    async def reply(self, conn: Connection) -> dict: ...
    def close_how(self) -> str: ...
    def close(self, conn: Connection, how: str) -> None: ...
    async def read_all(self, conn: Connection) -> None: ...


class BehaviourModel(Strict):
    before_head: ClassVar[bool] = False  # read() runs before the response head is read (it never reads it)

    async def read(self, client: ClientSide, conn: Connection, how: str) -> Connection:
        """Read the stream after a 200 head, as this behaviour does; the connection it ended on."""
        raise NotImplementedError
