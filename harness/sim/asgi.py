"""Calling the app in memory, as a server would over a socket: the HTTP scope of one request and
its receive(): the body once, then `http.disconnect` when the client is gone. The simulation's
connections (harness/sim/backend.py) and the tests' in-process service (tests/asgi.py) both use it."""

from __future__ import annotations

import asyncio

from starlette.types import Receive


def http_scope(method: str, path: str, headers: dict[str, str], state: dict,
               client: tuple[str, int] = ("127.0.0.1", 40000)) -> dict:
    """An HTTP/1.1 request's scope, with the ASGI spec version uvicorn announces (streamlab/responses.py
    says why that decides how a response hears a disconnect)."""
    return {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"}, "http_version": "1.1",
            "method": method, "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"",
            "root_path": "", "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()],
            "client": client, "server": ("127.0.0.1", 8000), "state": dict(state)}


def request_receive(body: bytes, gone: asyncio.Event) -> Receive:
    """The request's whole body in one message, then `http.disconnect` once `gone` is set."""
    sent = False

    async def receive() -> dict:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await gone.wait()
        return {"type": "http.disconnect"}
    return receive
