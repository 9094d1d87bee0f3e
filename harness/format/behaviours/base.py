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
    """A behaviour's traits are what every other module asks of it (the client's flow, the
    simulation, a target's scope, the checks, the swarm): declared here with their defaults and
    set by each behaviour on its own class, so that no other module names a kind."""

    before_head: ClassVar[bool] = False  # read() runs before the response head is read (it never reads it)
    owns_exchange: ClassVar[bool] = False  # runs its whole exchange itself (exchange()): its own body, its refusal
    refused: ClassVar[bool] = False  # the server must refuse it: no tokens, no identity reference, a refusal's cost
    resumes: ClassVar[bool] = False  # comes back with Last-Event-ID (the resumption check; a resume window)
    leaves_early: ClassVar[bool] = False  # leaves before its stream's end (release_within has something to time)
    waits_for_end: ClassVar[bool] = False  # stays until its stream ends
    may_be_dropped_slow: ClassVar[bool] = False  # a drop policy may cut it as a slow client
    reads_at_full_speed: ClassVar[bool] = False  # reads every event as soon as it arrives

    @property
    def close_mode(self) -> str:
        """How it leaves on purpose: fin, rst, or mixed (each client draws one)."""
        return "fin"

    @property
    def socket_rcvbuf(self) -> int | None:
        """Its own socket receive buffer (SO_RCVBUF), or None: the system's."""
        return None

    @property
    def slows_others(self) -> bool:
        """It holds its stream unread for a while, so the server's policy for slow clients acts."""
        return False

    @property
    def ours_only(self) -> str | None:
        """Why only our own server can run it (a feature of streamlab serve), or None."""
        return None

    def expected_refusal(self, refusals: dict) -> tuple[int, str | None] | None:
        """The (status, error type) it expects, given a target's own refusals table; None: not a refusal."""
        return None

    async def exchange(self, client: "ClientSide", budget: int) -> None:
        """The whole exchange, for a behaviour that owns_exchange."""
        raise NotImplementedError

    async def read(self, client: ClientSide, conn: Connection, how: str) -> Connection:
        """Read the stream after a 200 head, as this behaviour does; the connection it ended on."""
        raise NotImplementedError
