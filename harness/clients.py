"""Client behaviours over a transport (simulated or real sockets). They record; they never judge."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from typing import Protocol

from harness.scenario import BadRequest, Dropper, GroupSpec, Reader, Reconnector, Sleeper, Stalled
from harness.trace import StreamRecord
from harness.wire import StreamlabWire, Wire
from streamlab.sse import SSEEvent

READ_DEADLINE_S = 120.0  # no single read waits longer than this


class Connection(Protocol):
    ended: bool
    bytes_read: int

    async def read_head(self, timeout_s: float = ...): ...
    async def read_events(self, count: int | None = None, timeout_s: float = ...) -> list[SSEEvent]: ...
    async def read_chunk(self, max_bytes: int, timeout_s: float = ...) -> list[SSEEvent]: ...
    async def read_json(self, timeout_s: float = ...) -> dict: ...
    def close(self, how: str = "fin") -> None: ...


Opener = Callable[[str, dict | bytes, dict[str, str] | None], Awaitable[Connection]]


class Client:
    def __init__(self, group: GroupSpec, record: StreamRecord, rng: random.Random, clock: Callable[[], float],
                 on_first_token: Callable[[str], None] | None = None, wire: Wire = StreamlabWire()) -> None:
        self.wire = wire
        self.group = group
        self.behaviour = group.behaviour
        self.record = record
        self.rng = rng
        self.clock = clock
        self.on_first_token = on_first_token

    def _note(self, events: list[SSEEvent]) -> None:
        now = self.clock()
        for ev in events:
            first = not self.record.token_times
            if self.wire.note(self.record, ev, now) and first and self.on_first_token:
                self.on_first_token(self.group.name)

    async def run(self, open_connection: Opener, budget: int) -> None:
        rec = self.record
        behaviour = self.behaviour
        rec.sent_at = self.clock()
        if isinstance(behaviour, BadRequest):
            body, headers = self.wire.bad(behaviour.send, rec.prompt, budget)
            conn = await open_connection(self.wire.path, body, headers)
            try:
                head = await conn.read_head(READ_DEADLINE_S)
                rec.status, rec.head_at = head.status, self.clock()
                rec.error_type = self.wire.error_type(await self._reply(conn))
            finally:
                conn.close("fin")
            return
        conn = await open_connection(self.wire.path, self.wire.body(rec.prompt, rec.request), None)
        how = self._close_how()
        try:
            if isinstance(behaviour, Stalled):
                await asyncio.sleep(behaviour.give_up_s)  # never reads, not even the head
                self._close(conn, how)
                return
            head = await conn.read_head(READ_DEADLINE_S)
            rec.status, rec.head_at = head.status, self.clock()
            if head.status != 200:
                rec.error_type = self.wire.error_type(await self._reply(conn))
                return
            self.wire.on_head(rec, head.headers, rec.head_at)
            if isinstance(behaviour, Reader):
                while not conn.ended:
                    self._note(await conn.read_events(1, READ_DEADLINE_S))
            elif isinstance(behaviour, Sleeper):
                while not conn.ended:
                    self._note(await conn.read_chunk(behaviour.read_bytes, READ_DEADLINE_S))
                    if not conn.ended:
                        await asyncio.sleep(behaviour.sleep_s)
            elif isinstance(behaviour, Dropper):
                await self._drop(conn, behaviour, how)
            elif isinstance(behaviour, Reconnector):
                conn = await self._reconnect(conn, behaviour, open_connection)
        except (OSError, asyncio.TimeoutError, ConnectionError) as exc:
            rec.failure = f"{type(exc).__name__}: {exc}"
        finally:
            rec.bytes_read += conn.bytes_read
            if not conn.ended and rec.closed_at is None and rec.failure is None:
                self._close(conn, how)  # leaving on purpose (a dropper's deadline, say)
            elif rec.closed_at is None:
                conn.close("fin")  # done, or broken: not a client that left

    @staticmethod
    async def _reply(conn: Connection) -> dict:
        """A refusal's JSON body; a target may answer with something else (say, plain text)."""
        try:
            reply = await conn.read_json(READ_DEADLINE_S)
        except ValueError:
            return {}
        return reply if isinstance(reply, dict) else {}

    def _close_how(self) -> str:
        how = getattr(self.behaviour, "close", "fin")
        return self.rng.choice(["fin", "rst"]) if how == "mixed" else how

    def _close(self, conn: Connection, how: str) -> None:
        self.record.closed_at = self.clock()
        self.record.close_how = how
        conn.close(how)

    async def _drop(self, conn: Connection, behaviour: Dropper, how: str) -> None:
        rec = self.record
        if behaviour.while_waiting:
            while rec.start_at is None and not conn.ended:
                self._note(await conn.read_events(1, READ_DEADLINE_S))
        elif behaviour.after_s is not None:
            try:
                await asyncio.wait_for(self._read_all(conn), behaviour.after_s)
            except asyncio.TimeoutError:
                pass
        else:
            after = behaviour.after_tokens
            limit = self.rng.randint(*after) if isinstance(after, tuple) else after
            while len(rec.token_times) < limit and not conn.ended:
                self._note(await conn.read_events(1, READ_DEADLINE_S))
                if behaviour.read_pause_s and len(rec.token_times) < limit:
                    await asyncio.sleep(behaviour.read_pause_s)
        if not conn.ended or rec.finish is None:
            self._close(conn, how)

    async def _reconnect(self, conn: Connection, behaviour: Reconnector, open_connection: Opener) -> Connection:
        """Read; leave after N tokens or on a break; come back with Last-Event-ID; until the end."""
        rec = self.record
        left = behaviour.reconnects
        while True:
            after = behaviour.after_tokens
            limit = None if after is None or left == 0 else (
                self.rng.randint(*after) if isinstance(after, tuple) else after)
            start = len(rec.token_times)
            try:
                while not conn.ended and (limit is None or len(rec.token_times) - start < limit):
                    self._note(await conn.read_events(1, READ_DEADLINE_S))
            except (OSError, ConnectionError, asyncio.IncompleteReadError):
                if left == 0:
                    raise
            if conn.ended and rec.finish is not None:
                return conn
            rec.cuts.append(self.clock())
            rec.bytes_read += conn.bytes_read
            conn.close(self._close_how())
            while left > 0:  # come back; a refused or failed reconnect uses one attempt too
                left -= 1
                await asyncio.sleep(behaviour.gap_s)
                try:
                    conn = await open_connection(self.wire.path, self.wire.body(rec.prompt, rec.request),
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
                rec.error_type = self.wire.error_type(await self._reply(conn))
                conn.close("fin")
            else:
                rec.failure = f"could not resume: statuses {rec.resumes}"
                return conn

    async def _read_all(self, conn: Connection) -> None:
        while not conn.ended:
            self._note(await conn.read_events(1, READ_DEADLINE_S))


def with_headers(opener: Opener, extra: dict[str, str]) -> Opener:
    """Every request through `opener` also carries `extra` (the access key)."""
    if not extra:
        return opener

    async def open_(path: str, body, headers):
        return await opener(path, body, {**extra, **(headers or {})})  # a request's own header wins (wrong_key)
    return open_


async def launch(planned, records: list[StreamRecord], scenario, clock: Callable[[], float],
                 opener_for: Callable[[object], Opener], progress=None, wire: Wire = StreamlabWire()) -> None:
    """Run every planned client at its arrival time (join_while: counted from the named group's
    first token), at most `max_clients_at_once` at a time. Shared by simulation and live mode."""
    first_token = {g.name: asyncio.Event() for g in scenario.groups}
    slots = asyncio.Semaphore(scenario.max_clients_at_once or len(planned) or 1)
    finished = 0

    async def one(pc, record: StreamRecord) -> None:
        nonlocal finished
        if pc.group.arrival.kind == "join_while":
            await first_token[pc.group.arrival.group].wait()
            delay = pc.at_s
        else:
            delay = pc.at_s - clock()
        await asyncio.sleep(max(0.0, delay))
        async with slots:
            client = Client(pc.group, record, random.Random(pc.seed), clock, lambda g: first_token[g].set(), wire)
            try:
                await client.run(with_headers(opener_for(pc), wire.headers), scenario.server.max_tokens_budget)
            except (OSError, asyncio.TimeoutError, ConnectionError) as exc:  # refused at connect, say
                record.failure = f"{type(exc).__name__}: {exc}"
        finished += 1
        if progress:
            progress(finished, len(planned))

    await asyncio.gather(*(one(pc, rec) for pc, rec in zip(planned, records)))
