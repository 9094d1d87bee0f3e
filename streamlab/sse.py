"""Server-sent events: a writer and a parser built from the WHATWG rules. No I/O.

Shared by the service (writing) and the harness (reading). The parser is incremental:
`feed(chunk)` returns the events that chunk completed, whatever the chunk boundaries.
"""

from __future__ import annotations

import codecs
import json
import re
from dataclasses import dataclass

_NEWLINE = re.compile(r"\r\n|\r|\n")


def _check_single_line(name: str, value: str) -> None:
    if "\r" in value or "\n" in value:
        raise ValueError(f"SSE {name} must not contain a line break: {value!r}")


def encode_event(data: str, event: str | None = None, id: str | None = None, retry: int | None = None,
                 comment: str | None = None) -> bytes:
    """One event; multi-line data becomes one `data:` line per line. Always UTF-8."""
    out = []
    if comment is not None:
        out.append(encode_comment(comment).decode("utf-8"))
    if event is not None:
        _check_single_line("event", event)
        out.append(f"event: {event}\n")
    if id is not None:
        _check_single_line("id", id)
        if "\0" in id:
            raise ValueError("SSE id must not contain NUL")
        out.append(f"id: {id}\n")
    if retry is not None:
        if retry < 0:
            raise ValueError("SSE retry must be >= 0")
        out.append(f"retry: {retry}\n")
    out.extend(f"data: {line}\n" for line in _NEWLINE.split(data))
    out.append("\n")
    return "".join(out).encode("utf-8")


def encode_comment(text: str) -> bytes:
    """A comment line per line of text (ignored by readers; used for keep-alives and padding)."""
    return "".join(f":{' ' if line else ''}{line}\n" for line in _NEWLINE.split(text)).encode("utf-8")


# One encoder for every event: json.dumps with separators builds a new JSONEncoder per call.
_JSON = json.JSONEncoder(ensure_ascii=True, separators=(",", ":"))


def encode_json_event(event: str, payload: dict, id: int | str, padding: int = 0, retry: int | None = None) -> bytes:
    """The service's events: JSON that repeats its type, ASCII-escaped so U+2028/U+0085 never go raw.
    The bytes are encode_event's (tests/test_sse.py holds them equal), written without its line
    split: ASCII-escaped JSON has no line break in it, so it is always one `data:` line."""
    body = _JSON.encode({"type": event, **payload})
    id = str(id)
    _check_single_line("event", event)
    _check_single_line("id", id)
    if "\0" in id:
        raise ValueError("SSE id must not contain NUL")
    if retry is not None and retry < 0:
        raise ValueError("SSE retry must be >= 0")
    pad = f": {'x' * padding}\n" if padding else ""
    retry_line = f"retry: {retry}\n" if retry is not None else ""
    return f"{pad}event: {event}\nid: {id}\n{retry_line}data: {body}\n\n".encode("utf-8")


@dataclass(frozen=True)
class SSEEvent:
    event: str
    data: str
    id: str  # the last event id at dispatch ("" if none was ever set)
    retry: int | None  # the reconnection time last set, or None

    def json(self) -> dict:
        return json.loads(self.data)


class SSEParser:
    """Incremental WHATWG event-stream parser: feed(bytes) -> completed events; close()."""

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._started = False  # a leading BOM is stripped once
        self._buffer = ""
        self._skip_lf = False  # the last chunk ended in CR: an LF starting the next is part of it
        self._data: list[str] = []
        self._event_type = ""
        self._id_buffer = ""  # set by `id:` fields; becomes the last event id at each dispatch
        self._last_id = ""
        self._retry: int | None = None
        self._closed = False

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        if self._closed:
            raise ValueError("feed() after close()")
        text = self._decoder.decode(chunk)
        if not self._started and text:
            self._started = True
            if text.startswith("\ufeff"):
                text = text[1:]
        return self._lines(text)

    def close(self) -> list[SSEEvent]:
        """End of stream: an event without its blank line is discarded."""
        events = self._lines(self._decoder.decode(b"", final=True))
        self._closed = True
        self._buffer = ""
        self._data, self._event_type = [], ""
        return events

    @property
    def last_event_id(self) -> str:
        return self._last_id

    def _lines(self, text: str) -> list[SSEEvent]:
        if self._skip_lf and text:
            if text[0] == "\n":
                text = text[1:]
            self._skip_lf = False
        self._buffer += text
        events: list[SSEEvent] = []
        start = 0
        buf = self._buffer
        if "\r" not in buf:  # the common case, LF only: one split instead of a search per line
            *lines, self._buffer = buf.split("\n")
            for line in lines:
                event = self._line(line)
                if event is not None:
                    events.append(event)
            return events
        while True:
            match = _NEWLINE.search(buf, start)
            if match is None:
                break
            if match.group() == "\r" and match.end() == len(buf):
                self._skip_lf = True  # maybe CRLF split across chunks
            event = self._line(buf[start:match.start()])
            if event is not None:
                events.append(event)
            start = match.end()
        self._buffer = buf[start:]
        return events

    def _line(self, line: str) -> SSEEvent | None:
        if line == "":
            return self._dispatch()
        if line.startswith(":"):
            return None
        field, sep, value = line.partition(":")
        if sep and value.startswith(" "):
            value = value[1:]
        if field == "event":
            self._event_type = value
        elif field == "data":
            self._data.append(value)
        elif field == "id":
            if "\0" not in value:
                self._id_buffer = value
        elif field == "retry":
            if value and all("0" <= c <= "9" for c in value):
                self._retry = int(value)
        return None

    def _dispatch(self) -> SSEEvent | None:
        self._last_id = self._id_buffer  # counts even when no event is dispatched
        data, event_type = self._data, self._event_type
        self._data, self._event_type = [], ""
        if not data:
            return None
        return SSEEvent(event_type or "message", "\n".join(data), self._last_id, self._retry)
