"""A header-read timeout and a head-size limit for uvicorn, which has neither (the slowloris guard).

uvicorn closes an idle keep-alive connection after `timeout_keep_alive`, but a client that
has started a request head and sends it a byte at a time holds its connection (and a slot in
`limit_concurrency`) for as long as it likes: data arriving cancels the keep-alive timer, and
nothing times the head itself. This protocol is uvicorn's own h11 protocol plus one timer: from
the moment a connection is waiting for a request head (when it opens, and when a keep-alive
connection's next request starts arriving) the whole head must arrive within
`header_timeout_s`, or the server answers 408 with our error envelope and closes the connection.

h11's own limit on a head (16 KB) holds only while the head is incomplete: a 100 KB head that
arrives in one read is accepted whole. So the bytes read while waiting for a head are counted
too, and past `max_head_bytes` the answer is 431 and the connection closed.

A connection closed while its client is still sending (a request body we answered without
reading, 413; a head we refused, 431 or 408) lingers, as nginx's `lingering_close` does: our
answer, then FIN, then what the client still sends is read and dropped until it closes or
LINGER_S passes. Closing at once with unread bytes in the socket makes the kernel send RST, and
a client that receives RST before reading our answer loses it: CI read a 70 KB body's 413 as a
reset connection.
"""

from __future__ import annotations

import asyncio
import json

from uvicorn.protocols.http.h11_impl import H11Protocol

from streamlab.errors import envelope

def _closing_response(status: bytes, error_type: str, message: str) -> bytes:
    body = json.dumps(envelope(error_type, message)).encode()
    return (b"HTTP/1.1 " + status + b"\r\ncontent-type: application/json\r\ncontent-length: "
            + str(len(body)).encode() + b"\r\nconnection: close\r\n\r\n" + body)


TIMEOUT_RESPONSE = _closing_response(b"408 Request Timeout", "header_timeout", "the request head did not arrive in time")
TOO_LARGE_RESPONSE = _closing_response(b"431 Request Header Fields Too Large", "header_too_large",
                                       "the request head is over the size limit")


LINGER_S = 2.0  # bounded: a client that never closes is closed after this


class _LingeringTransport:
    """The transport as uvicorn's request cycle sees it: close() lingers where the request's body
    is still arriving (the protocol decides); everything else is the real transport's."""

    def __init__(self, transport, protocol) -> None:
        self._transport, self._protocol = transport, protocol
        # Bound once: uvicorn writes every chunk through here, and __getattr__ would run per write.
        self.write, self.get_extra_info = transport.write, transport.get_extra_info

    def __getattr__(self, name):
        return getattr(self._transport, name)

    def close(self) -> None:
        if self._protocol.body_unread():
            self._protocol.linger()
        else:
            self._transport.close()

    def is_closing(self) -> bool:
        return self._protocol.lingering or self._transport.is_closing()


CONNECTION_LOST = "streamlab.connection_lost"  # scope key: a callable, true once the client's connection is gone


def guarded_h11(header_timeout_s: float, max_head_bytes: int = 16 * 1024) -> type[H11Protocol]:
    """uvicorn's h11 protocol class with a header-read timeout and a head-size limit
    (uvicorn.Config(http=...))."""

    class HeaderTimeoutH11Protocol(H11Protocol):
        _head_timer: asyncio.TimerHandle | None = None
        _head = b""  # the bytes of the head being awaited, up to the limit (a body may follow in the same read)
        _raw = None  # the real transport (self.transport is it, lingering on close)
        _linger_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport) -> None:  # type: ignore[override]
            self._raw = transport
            super().connection_made(_LingeringTransport(transport, self))
            self._arm()

        @property
        def lingering(self) -> bool:
            return self._linger_timer is not None

        def body_unread(self) -> bool:
            """The request being answered is still sending its body (uvicorn's cycle)."""
            return self.cycle is not None and self.cycle.more_body and not self.cycle.disconnected

        def linger(self) -> None:
            """Our answer, then FIN; drop what the client still sends; close on its EOF or after LINGER_S."""
            self._disarm()
            if self.lingering or self._raw.is_closing():
                return
            if not self._raw.can_write_eof():  # TLS in this process: no half-close to linger with
                self._raw.close()
                return
            try:
                self._raw.write_eof()
                self._raw.resume_reading()
            except (OSError, RuntimeError):
                self._raw.close()
                return
            self._linger_timer = self.loop.call_later(LINGER_S, self._raw.close)

        def eof_received(self):
            if self.lingering:
                return None  # asyncio closes the transport: the client has read our answer and closed
            return super().eof_received()

        def data_received(self, data: bytes) -> None:
            if self.lingering:
                return  # what the client still sends after our answer: read, so no RST, and dropped
            waiting_for_head = self.cycle is None or self.cycle.response_complete
            if self._head_timer is None and waiting_for_head:
                self._arm()  # a keep-alive connection's next head starts arriving now
            if waiting_for_head:
                self._head += data[: max_head_bytes + 4 - len(self._head)]
                ended = b"\n\r\n" in self._head or b"\n\n" in self._head  # what follows is body, not head
                if not ended and len(self._head) > max_head_bytes:
                    self.transport.write(TOO_LARGE_RESPONSE)
                    self.linger()  # the rest of the head is still arriving
                    return
            super().data_received(data)

        def handle_events(self) -> None:
            before = self.cycle
            super().handle_events()
            if self.cycle is not before:  # a whole head arrived: the request is the app's now
                self._disarm()
                cycle = self.cycle
                # uvicorn's send() returns silently once the connection is lost, and the app hears
                # of it only when its listener task next runs: a body loop may take events (and
                # resume a paused sequence, its queue drained) before then. This asks directly.
                cycle.scope[CONNECTION_LOST] = lambda: cycle.disconnected

        def connection_lost(self, exc) -> None:
            self._disarm()
            if self._linger_timer is not None:
                self._linger_timer.cancel()
            super().connection_lost(exc)

        def _arm(self) -> None:
            self._disarm()
            self._head = b""
            self._head_timer = self.loop.call_later(header_timeout_s, self._head_timed_out)

        def _disarm(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _head_timed_out(self) -> None:
            self._head_timer = None
            if self.transport.is_closing() or not (self.cycle is None or self.cycle.response_complete):
                return
            self.transport.write(TIMEOUT_RESPONSE)
            self.linger()  # a slow head may still be arriving

    return HeaderTimeoutH11Protocol
