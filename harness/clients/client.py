"""Clients over a transport (simulated or real sockets), each reading as its behaviour does
(harness/format/behaviours/), and launch(), which runs them at their arrival times. They record; they
never judge."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from harness.format.behaviours import READ_DEADLINE_S
from harness.format.behaviours.base import Connection
from harness.format.scenario import GroupSpec
from harness.machine.lag import LoopLag
from harness.record.trace import StreamRecord
from harness.clients.wire import StreamlabWire, Wire
from streamlab.sse import SSEEvent
from harness.clients.rawhttp import RawExchange
from harness.machine.reach import Origin

Opener = Callable[[str, dict | bytes, dict[str, str] | None], Awaitable[Connection]]


class Client:
    """One planned client: it sends its request and keeps the record every client keeps (times,
    status, events, how it left); how it reads the stream is its behaviour's (harness.format.behaviours)."""

    def __init__(self, group: GroupSpec, record: StreamRecord, rng: random.Random, clock: Callable[[], float],
                 on_first_token: Callable[[str], None] | None = None, wire: Wire = StreamlabWire()) -> None:
        self.wire = wire
        self.group = group
        self.behaviour = group.behaviour
        self.record = record
        self.rng = rng
        self.clock = clock
        self.on_first_token = on_first_token
        self.open_connection: Opener | None = None

    def note(self, events: list[SSEEvent], conn: Connection) -> None:
        """Record events at the time their bytes arrived (conn.arrived_ago: the kernel's stamp on a
        raw socket, the pipe's arrival in simulation), not when this client's loop got round to
        reading them; HTTP/2 over TLS has no stamp (0) and records at the read."""
        if not events:
            return
        now = self.arrived_at(conn)
        for ev in events:
            first = not self.record.token_times
            if self.wire.note(self.record, ev, now) and first and self.on_first_token:
                self.on_first_token(self.group.name)

    def arrived_at(self, conn: Connection) -> float:
        """This client's clock at the moment the bytes of conn's last read arrived."""
        return self.clock() - conn.arrived_ago()

    async def run(self, open_connection: Opener, budget: int) -> None:
        rec = self.record
        behaviour = self.behaviour
        self.open_connection = open_connection
        rec.sent_at = self.clock()
        if behaviour.owns_exchange:  # its whole exchange is its own: a bad body, a refusal
            await behaviour.exchange(self, budget)
            return
        conn = await open_connection(self.wire.path, self.wire.body(rec.prompt, rec.request), None)
        how = self.close_how()
        try:
            if behaviour.before_head:
                conn = await behaviour.read(self, conn, how)
                return
            head = await conn.read_head(READ_DEADLINE_S)
            rec.status, rec.head_at = head.status, self.arrived_at(conn)
            if head.status != 200:
                rec.error_type = self.wire.error_type(await self.reply(conn))
                return
            self.wire.on_head(rec, head.headers, rec.head_at)
            conn = await behaviour.read(self, conn, how)
        except (OSError, asyncio.TimeoutError, ConnectionError) as exc:
            rec.failure = f"{type(exc).__name__}: {exc}"
        finally:
            rec.bytes_read += conn.bytes_read
            if not conn.ended and rec.closed_at is None and rec.failure is None:
                self.close(conn, how)  # leaving on purpose (a dropper's deadline, say)
            elif rec.closed_at is None:
                conn.close("fin")  # done, or broken: not a client that left

    @staticmethod
    async def reply(conn: Connection) -> dict:
        """A refusal's JSON body; a target may answer with something else (say, plain text)."""
        try:
            reply = await conn.read_json(READ_DEADLINE_S)
        except ValueError:
            return {}
        return reply if isinstance(reply, dict) else {}

    def close_how(self) -> str:
        how = self.behaviour.close_mode
        return self.rng.choice(["fin", "rst"]) if how == "mixed" else how

    def close(self, conn: Connection, how: str) -> None:
        """Leave on purpose: the record says when and how."""
        self.record.closed_at = self.clock()
        self.record.close_how = how
        conn.close(how)

    async def read_all(self, conn: Connection) -> None:
        while not conn.ended:
            self.note(await conn.read_events(1, READ_DEADLINE_S), conn)


def raw_opener(port: int, behaviour, sampled: list | None = None, origin: Origin | None = None,
               host: str = "127.0.0.1") -> Opener:
    """HTTP/1.1 to host:port (a Toxiproxy listener, or the server), as a client of this behaviour
    connects (a sleeper with its own receive buffer), for `origin` (its Host header, and TLS where
    it speaks https; default: host:port itself). The live server's and a shard worker's clients
    both open through it. sampled: a list that takes each exchange opened, keeping its stamps'
    bounds (harness.clients.rawhttp; the capacity benchmark)."""
    rcvbuf = behaviour.socket_rcvbuf

    async def opener(path: str, body, headers):
        exchange = await RawExchange.open(host, port, "POST", path, body, headers=headers, rcvbuf=rcvbuf,
                                          sampled=sampled is not None, origin=origin)
        if sampled is not None:
            sampled.append(exchange)
        return exchange
    return opener


def with_headers(opener: Opener, extra: dict[str, str]) -> Opener:
    """Every request through `opener` also carries `extra` (the access key)."""
    if not extra:
        return opener

    async def open_(path: str, body, headers):
        return await opener(path, body, {**extra, **(headers or {})})  # a request's own header wins (wrong_key)
    return open_


CANCEL_TRIES = 20  # a client past the run's deadline is cancelled at most this many times, a second apart


async def launch(planned, records: list[StreamRecord], scenario, clock: Callable[[], float],
                 opener_for: Callable[[object], Opener], progress=None, wire: Wire = StreamlabWire(),
                 deadline_s: float | None = None, watch_lag: bool = False) -> dict:
    """Run every planned client at its arrival time (join_while: counted from the named group's
    first token), at most `max_clients_at_once` at a time. Shared by simulation and live mode.
    deadline_s: clients still running that long after the last one's planned arrival are stopped
    where they are, their records saying so (a stream the server never ends would otherwise keep
    its reader on keep-alives for ever). Each record keeps when it was planned and due, so how late
    the harness sent it is known; watch_lag (live: a real clock) also samples this loop's lag,
    returned as {"p50", "p99", "max"} in ms ({} without)."""
    if watch_lag:
        async with LoopLag(LAG_PERIOD_S, clock) as lag:
            await _launch(planned, records, scenario, clock, opener_for, progress, wire, deadline_s)
        return {"p50": lag.ms(50), "p99": lag.ms(99), "max": lag.max_ms()}
    await _launch(planned, records, scenario, clock, opener_for, progress, wire, deadline_s)
    return {}


LAG_PERIOD_S = 0.01  # the lag probe's sleep: 100 wake-ups a second, nothing beside 1,000 clients' reads


async def _launch(planned, records: list[StreamRecord], scenario, clock: Callable[[], float],
                  opener_for: Callable[[object], Opener], progress, wire: Wire, deadline_s: float | None) -> None:
    first_token = {g.name: asyncio.Event() for g in scenario.groups}
    # A group that ends with no token at all (every request refused: vLLM refuses a blocker whose
    # prompt and max_tokens pass its context) lets its joiners go at its end: they would wait forever.
    running = {g.name: sum(1 for pc in planned if pc.group.name == g.name) for g in scenario.groups}
    slots = asyncio.Semaphore(scenario.max_clients_at_once or len(planned) or 1)
    finished = 0

    async def one(pc, record: StreamRecord) -> None:
        nonlocal finished
        if pc.group.arrival.kind == "join_while":
            await first_token[pc.group.arrival.group].wait()
            record.planned_at = clock() + pc.at_s
        else:
            record.planned_at = pc.at_s
        await asyncio.sleep(max(0.0, record.planned_at - clock()))
        held = slots.locked()  # every slot taken: waiting for one is the scenario's own limit, not lateness
        async with slots:
            record.due_at = clock() if held else record.planned_at
            client = Client(pc.group, record, random.Random(pc.seed), clock, lambda g: first_token[g].set(), wire)
            try:
                await client.run(with_headers(opener_for(pc), wire.headers), scenario.server.max_tokens_budget)
            except (OSError, asyncio.TimeoutError, ConnectionError) as exc:  # refused at connect, say
                record.failure = f"{type(exc).__name__}: {exc}"
            except asyncio.CancelledError:
                record.failure = record.failure or "still waiting when the run was stopped (its deadline)"
                raise
            finally:
                running[pc.group.name] -= 1
                if not running[pc.group.name]:
                    first_token[pc.group.name].set()
        finished += 1
        if progress:
            progress(finished, len(planned))

    if deadline_s is None:
        await asyncio.gather(*(one(pc, rec) for pc, rec in zip(planned, records)))
        return
    tasks = [asyncio.ensure_future(one(pc, rec)) for pc, rec in zip(planned, records)]
    _, pending = await asyncio.wait(tasks, timeout=deadline_s + max((pc.at_s for pc in planned), default=0.0))
    # The clients still running are stopped, each record saying so. A cancel that lands as a read
    # completes is lost inside Python 3.11's wait_for (it returns the read), and a stream that
    # never ends reads keep-alives for ever: so cancel again until each has stopped (bounded).
    for _ in range(CANCEL_TRIES):
        if not pending:
            break
        for t in pending:
            t.cancel()
        _, pending = await asyncio.wait(pending, timeout=1.0)
    if pending:
        raise RuntimeError(f"{len(pending)} clients did not stop when cancelled {CANCEL_TRIES} times")
    for t in tasks:  # as gather would: a client that broke breaks the run
        if not t.cancelled() and t.exception() is not None:
            raise t.exception()
