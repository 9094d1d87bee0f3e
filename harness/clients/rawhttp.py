"""One HTTP/1.1 exchange over a raw socket, with the client's behaviour exact.

The caller decides when to read (a reader that stops reading really stops: with a small
receive buffer, backpressure reaches the server), and how to leave: `close_fin()` is an
orderly close, `close_rst()` closes with SO_LINGER 0 so the kernel sends a reset.
h11 does the HTTP framing (chunked bodies included); SSE parsing is streamlab.sse.
Every exchange has SO_TIMESTAMPNS on: the kernel stamps each segment as it lands in the receive
queue, and a read returns its last segment's stamp. A client records an event at that stamp
(arrived_ago), not when its loop got round to the read, so a busy harness records the time the
bytes came, not the time it read them. A sampled exchange (the capacity benchmark's) also keeps
each read's times and bytes, to bound how far that stamp is from each event's own arrival.
TLS (an https origin) runs over the same raw socket through an in-memory ssl object, so the
receive buffer, the kernel's stamps and a real FIN or RST stay the client's own.
Every connection is opened here, and only to a host harness.machine.reach allows.
"""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
import struct
import time
from dataclasses import dataclass, field

import h11

from harness.machine import reach
from streamlab.sse import SSEEvent, SSEParser

RECV_BYTES = 65536
# Linux's SO_TIMESTAMPNS (and its control message's type): the kernel stamps each segment with the
# wall-clock time it landed in the socket's receive queue; a read returns its last segment's stamp.
SO_TIMESTAMPNS = 35
STAMP_SPACE = socket.CMSG_SPACE(16)


@dataclass
class Head:
    status: int
    headers: dict[str, str]


@dataclass
class Read:
    """One read of a sampled exchange, in wall-clock seconds: when it began, when the read before
    it began (everything queued then went to that read, so this one's bytes all came later; 0
    where that read filled its buffer and may have left some), the kernel's stamp of its last
    segment (0: none), when it returned, and its bytes."""
    began: float
    after: float
    stamp: float
    returned: float
    data: bytes


@dataclass
class RawExchange:
    sock: socket.socket
    conn: h11.Connection
    parser: SSEParser = field(default_factory=SSEParser)
    head: Head | None = None
    body: bytearray = field(default_factory=bytearray)
    ended: bool = False  # the server finished the response
    closed: bool = False
    bytes_read: int = 0
    stamps: list["Read"] | None = None  # sampled only: every read that got bytes
    _arrived: float = 0.0  # the kernel's stamp (wall clock) of the last read's last segment
    _read_from: float = 0.0  # wall clock as the last read that got bytes began
    tls: "_Tls | None" = None  # an https origin's encryption over this socket

    @classmethod
    async def open(cls, host: str, port: int, method: str, path: str, body: dict | bytes | None = None,
                   headers: dict[str, str] | None = None, rcvbuf: int | None = None,
                   timeout_s: float = 10.0, sampled: bool = False,
                   origin: reach.Origin | None = None) -> "RawExchange":
        """Connect to host:port and send the request. `origin`: the server the request is for, where
        the connection goes through something else (a Toxiproxy listener): its name is the Host
        header and, over TLS, the name its certificate is checked against."""
        reach.check(host)
        loop = asyncio.get_running_loop()
        sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
        sock.setblocking(False)
        if rcvbuf is not None:  # before connect, so the window is small from the handshake on
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        try:
            sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        except OSError:  # not Linux: no stamps, and events are recorded as their reads return
            pass
        try:
            await asyncio.wait_for(loop.sock_connect(sock, (host, port)), timeout_s)
        except BaseException:
            sock.close()
            raise
        exchange = cls(sock, h11.Connection(h11.CLIENT), stamps=[] if sampled else None)
        if origin is not None and origin.tls is not None:
            try:
                exchange.tls = _Tls(origin.tls, origin.host)
                await asyncio.wait_for(exchange.tls.handshake(exchange), timeout_s)
            except BaseException:
                sock.close()
                raise
        raw = body if isinstance(body, bytes) else (json.dumps(body).encode() if body is not None else b"")
        authority = origin.authority if origin is not None else f"{host}:{port}"
        hdrs = [("host", authority), ("content-length", str(len(raw)))]
        if body is not None and not isinstance(body, bytes):
            hdrs.append(("content-type", "application/json"))
        hdrs += list((headers or {}).items())
        conn = exchange.conn
        out = conn.send(h11.Request(method=method, target=path, headers=hdrs)) + conn.send(h11.Data(data=raw))
        out += conn.send(h11.EndOfMessage())
        try:
            await asyncio.wait_for(exchange._send(out), timeout_s)
        except BaseException:  # reset while sending (a proxy's reset_peer toxic, say)
            sock.close()
            raise
        return exchange

    async def _send(self, data: bytes) -> None:
        if self.tls is not None:
            data = self.tls.wrap(data)
        await asyncio.get_running_loop().sock_sendall(self.sock, data)

    async def _next(self, timeout_s: float, max_bytes: int = RECV_BYTES) -> h11.Event | type[h11.NEED_DATA] | None:
        event = self.conn.next_event()
        if event is h11.NEED_DATA:
            async with asyncio.timeout(timeout_s):  # not wait_for: that makes a task for every read
                data = await self._recv(max_bytes)
            self.bytes_read += len(data)
            self.conn.receive_data(data)
            if not data and self.conn.their_state is not h11.DONE:
                raise ConnectionError("the server closed the connection mid-response")
            return None
        return event

    async def _recv(self, max_bytes: int) -> bytes:
        """The next bytes of the response (b"": the server closed), decrypted over TLS."""
        if self.tls is None:
            return await self._recv_raw(max_bytes)
        while True:
            plain = self.tls.unwrap(max_bytes)
            if plain is not None:
                return plain
            self.tls.feed(await self._recv_raw(max_bytes))

    async def _recv_raw(self, max_bytes: int) -> bytes:
        loop = asyncio.get_running_loop()
        while True:
            began = time.time()
            try:
                data, ancillary, _, _ = self.sock.recvmsg(max_bytes, STAMP_SPACE)
                break
            except (BlockingIOError, InterruptedError):
                ready = loop.create_future()
                loop.add_reader(self.sock, lambda: ready.done() or ready.set_result(None))
                try:
                    await ready
                finally:
                    loop.remove_reader(self.sock)
        stamp = 0.0
        for level, kind, raw in ancillary:
            if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS:
                seconds, nanoseconds = struct.unpack("qq", raw[:16])
                stamp = seconds + nanoseconds / 1e9
        if self.stamps is not None and data:
            self.stamps.append(Read(began, self._read_from, stamp, time.time(), data))
        if stamp:
            self._arrived = stamp
        # A read that filled max_bytes may have left bytes queued, which came before it began.
        self._read_from = began if len(data) < max_bytes else 0.0
        return data

    def arrived_ago(self) -> float:
        """Seconds since the bytes of the last read arrived (the kernel's stamp; 0 if it gave none)."""
        return max(0.0, time.time() - self._arrived) if self._arrived else 0.0

    async def read_head(self, timeout_s: float = 30.0) -> Head:
        while self.head is None:
            event = await self._next(timeout_s)
            if isinstance(event, h11.Response):
                self.head = Head(event.status_code, {k.decode().lower(): v.decode() for k, v in event.headers})
        return self.head

    async def read_events(self, count: int | None = None, timeout_s: float = 30.0) -> list[SSEEvent]:
        """Read until `count` more events arrived (or the response ended)."""
        await self.read_head(timeout_s)
        got: list[SSEEvent] = []
        while not self.ended and (count is None or len(got) < count):
            self._take(await self._next(timeout_s), got)
        return got

    async def read_chunk(self, max_bytes: int, timeout_s: float = 30.0) -> list[SSEEvent]:
        """One recv of at most max_bytes (a reader that takes a chunk at a time), and its events."""
        await self.read_head(timeout_s)
        got: list[SSEEvent] = []
        received = False
        while not self.ended:
            event = await self._next(timeout_s, max_bytes) if not received else self.conn.next_event()
            if event is None:
                received = True
                continue
            if event is h11.NEED_DATA:
                break
            self._take(event, got)
        return got

    def _take(self, event, got: list[SSEEvent]) -> None:
        """Body bytes go to the parser; the end of the message closes it."""
        if isinstance(event, h11.Data):
            self.body += event.data
            got.extend(self.parser.feed(bytes(event.data)))
        elif isinstance(event, h11.EndOfMessage):
            self.ended = True
            got.extend(self.parser.close())

    async def read_body(self, timeout_s: float = 30.0) -> bytes:
        await self.read_head(timeout_s)
        while not self.ended:
            event = await self._next(timeout_s)
            if isinstance(event, h11.Data):
                self.body += event.data
            elif isinstance(event, h11.EndOfMessage):
                self.ended = True
        return bytes(self.body)

    async def read_json(self, timeout_s: float = 30.0) -> dict:
        return json.loads(await self.read_body(timeout_s))

    def close_fin(self) -> None:
        """An orderly close: the server reads end-of-file."""
        if not self.closed:
            self.closed = True
            self.sock.close()

    def close_rst(self) -> None:
        """An abortive close: SO_LINGER 0 makes the kernel send RST instead of FIN."""
        if not self.closed:
            self.closed = True
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.sock.close()

    def close(self, how: str = "fin") -> None:
        {"fin": self.close_fin, "rst": self.close_rst}[how]()


class _Tls:
    """TLS over an exchange's own socket: bytes in and out through memory, the socket unchanged."""

    def __init__(self, context: ssl.SSLContext, server_name: str) -> None:
        self.incoming, self.outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.obj = context.wrap_bio(self.incoming, self.outgoing, server_hostname=server_name.strip("[]"))

    async def handshake(self, exchange: RawExchange) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                self.obj.do_handshake()
                break
            except ssl.SSLWantReadError:
                pending = self.outgoing.read()
                if pending:
                    await loop.sock_sendall(exchange.sock, pending)
                data = await exchange._recv_raw(RECV_BYTES)
                if not data:
                    raise ConnectionError("the server closed the connection during the TLS handshake")
                self.incoming.write(data)
        pending = self.outgoing.read()
        if pending:
            await loop.sock_sendall(exchange.sock, pending)

    def wrap(self, data: bytes) -> bytes:
        self.obj.write(data)
        return self.outgoing.read()

    def feed(self, data: bytes) -> None:
        if data:
            self.incoming.write(data)
        else:
            self.incoming.write_eof()

    def unwrap(self, max_bytes: int) -> bytes | None:
        """Decrypted bytes, b"" at the end of the stream, None: more bytes must come first."""
        try:
            return self.obj.read(max_bytes)
        except ssl.SSLWantReadError:
            return None
        except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
            return b""
