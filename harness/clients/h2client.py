"""One HTTP/2 exchange over TLS (what a browser speaks to a reverse proxy), with the same reads
and closes as harness.clients.rawhttp.RawExchange, so client behaviours run over it unchanged.

One TCP connection per exchange, as a client that reconnects would have. `close_fin()` cancels
the stream (RST_STREAM CANCEL, the HTTP/2 way to leave) and closes the TLS connection in
order; `close_rst()` aborts the TCP connection with SO_LINGER 0, so the proxy gets a reset.
The h2 library does the framing; SSE parsing is streamlab.sse.
"""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
import struct
from pathlib import Path

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions

from harness.clients.rawhttp import RECV_BYTES, Head
from streamlab.sse import SSEEvent, SSEParser


class H2Exchange:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, conn: h2.connection.H2Connection,
                 stream_id: int) -> None:
        self.reader, self.writer, self.conn, self.stream_id = reader, writer, conn, stream_id
        self.parser = SSEParser()
        self.head: Head | None = None
        self.body = bytearray()
        self.pending: list[bytes] = []  # data received but not yet handed to the parser
        self.ended = False
        self.closed = False
        self.bytes_read = 0

    @classmethod
    async def open(cls, host: str, port: int, method: str, path: str, body: dict | bytes | None = None,
                   headers: dict[str, str] | None = None, ca_file: Path | None = None, server_name: str = "localhost",
                   timeout_s: float = 10.0, **_ignored) -> "H2Exchange":
        if not host.startswith("127.") and host != "localhost":
            raise ValueError("load and fault tests target loopback only")
        context = ssl.create_default_context(cafile=str(ca_file) if ca_file else None)
        context.set_alpn_protocols(["h2"])
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(host, port, ssl=context, server_hostname=server_name), timeout_s)
        try:
            if writer.get_extra_info("ssl_object").selected_alpn_protocol() != "h2":
                raise ConnectionError("the proxy did not agree to HTTP/2 (ALPN)")
            conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
            conn.initiate_connection()
            raw = body if isinstance(body, bytes) else (json.dumps(body).encode() if body is not None else b"")
            hdrs = [(":method", method), (":path", path), (":scheme", "https"), (":authority", f"{server_name}:{port}"),
                    ("content-length", str(len(raw)))]
            if body is not None and not isinstance(body, bytes):
                hdrs.append(("content-type", "application/json"))
            hdrs += [(k.lower(), v) for k, v in (headers or {}).items()]
            stream_id = conn.get_next_available_stream_id()
            conn.send_headers(stream_id, hdrs, end_stream=not raw)
            if raw:
                conn.send_data(stream_id, raw, end_stream=True)
            writer.write(conn.data_to_send())
            await asyncio.wait_for(writer.drain(), timeout_s)
        except BaseException:
            writer.close()
            raise
        return cls(reader, writer, conn, stream_id)

    async def _receive(self, timeout_s: float, max_bytes: int = RECV_BYTES) -> None:
        data = await asyncio.wait_for(self.reader.read(max_bytes), timeout_s)
        if not data:
            raise ConnectionError("the proxy closed the connection mid-response")
        self.bytes_read += len(data)
        for event in self.conn.receive_data(data):
            if getattr(event, "stream_id", self.stream_id) != self.stream_id:
                continue
            if isinstance(event, h2.events.ResponseReceived):
                headers = dict(event.headers)
                self.head = Head(int(headers.pop(":status")), {k.lower(): v for k, v in headers.items()})
            elif isinstance(event, h2.events.DataReceived):
                self.pending.append(event.data)
                self.conn.acknowledge_received_data(event.flow_controlled_length, self.stream_id)
            elif isinstance(event, h2.events.StreamEnded):
                self.ended = True
            elif isinstance(event, h2.events.StreamReset):
                raise ConnectionError(f"the proxy reset the stream (error {event.error_code})")
            elif isinstance(event, h2.events.ConnectionTerminated):
                raise ConnectionError(f"the proxy ended the connection (error {event.error_code})")
        out = self.conn.data_to_send()
        if out:
            self.writer.write(out)

    def _drain_pending(self) -> list[SSEEvent]:
        got: list[SSEEvent] = []
        for data in self.pending:
            self.body += data
            got.extend(self.parser.feed(data))
        self.pending.clear()
        if self.ended:
            got.extend(self.parser.close())
        return got

    async def read_head(self, timeout_s: float = 30.0) -> Head:
        while self.head is None:
            await self._receive(timeout_s)
        return self.head

    async def read_events(self, count: int | None = None, timeout_s: float = 30.0) -> list[SSEEvent]:
        await self.read_head(timeout_s)
        got = self._drain_pending()
        while not self.ended and (count is None or len(got) < count):
            await self._receive(timeout_s)
            got += self._drain_pending()
        return got

    async def read_chunk(self, max_bytes: int, timeout_s: float = 30.0) -> list[SSEEvent]:
        await self.read_head(timeout_s)
        if not self.pending and not self.ended:
            await self._receive(timeout_s, max_bytes)
        return self._drain_pending()

    async def read_body(self, timeout_s: float = 30.0) -> bytes:
        await self.read_head(timeout_s)
        while not self.ended:
            await self._receive(timeout_s)
        self._drain_pending()
        return bytes(self.body)

    async def read_json(self, timeout_s: float = 30.0) -> dict:
        return json.loads(await self.read_body(timeout_s))

    def arrived_ago(self) -> float:
        """0: TLS is read through asyncio's stream, which has no kernel receive stamp, so an event
        is recorded as it is read (how late that can be: docs/HARNESS.md)."""
        return 0.0

    def close_fin(self) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            if not self.ended:
                self.conn.reset_stream(self.stream_id, h2.errors.ErrorCodes.CANCEL)
            self.conn.close_connection()
            self.writer.write(self.conn.data_to_send())
        except (h2.exceptions.ProtocolError, OSError, RuntimeError):
            pass
        self.writer.close()

    def close_rst(self) -> None:
        if self.closed:
            return
        self.closed = True
        sock = self.writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.writer.transport.abort()

    def close(self, how: str = "fin") -> None:
        {"fin": self.close_fin, "rst": self.close_rst}[how]()
