"""A real uvicorn server on a loopback port, in a thread of the test process."""

from __future__ import annotations

import dataclasses

import asyncio
import socket
import threading
import time
from contextlib import contextmanager

import uvicorn

from harness.clients.rawhttp import RawExchange
from streamlab.app import create_app
from streamlab.config import ServiceConfig
from streamlab.idle import drained

START_DEADLINE_S = 30.0


class AppServer:
    """Any ASGI app under uvicorn on a free port of a loopback address (127.0.0.1, or another 127.x
    standing in for a remote host), plain or https (`tls`: a certificate file and its key)."""

    def __init__(self, app, host: str = "127.0.0.1", tls: tuple[str, str] | None = None) -> None:
        self.app, self.host, self.tls = app, host, tls
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((host, 0))
        self.port = self.sock.getsockname()[1]
        certfile, keyfile = tls or (None, None)
        self.server = uvicorn.Server(uvicorn.Config(self.app, log_level="warning", lifespan="on",
                                                    ssl_certfile=certfile, ssl_keyfile=keyfile))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)

    def start(self) -> None:
        self.thread.start()
        deadline = time.monotonic() + START_DEADLINE_S
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.01)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)
        self.sock.close()

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.host}:{self.port}"

    async def request(self, method: str, path: str, body=None, **kw) -> RawExchange:
        return await RawExchange.open("127.0.0.1", self.port, method, path, body, **kw)

    async def get_json(self, path: str) -> dict:
        ex = await self.request("GET", path)
        try:
            return await ex.read_json()
        finally:
            ex.close_fin()


class InProcessServer(AppServer):
    """`create_app` with the tiny model, in the test process."""

    def __init__(self, config: ServiceConfig, loaded) -> None:
        # debug: these tests read the server's books at /debug/releases, as the harness does.
        super().__init__(create_app(dataclasses.replace(config, debug=True), loaded))

    @property
    def hub(self):
        return self.app.state.hub

    async def settle(self, deadline_s: float = 15.0) -> dict:
        stats = await self.get_json("/stats")
        for _ in range(int(deadline_s / 0.02)):
            if drained(stats):
                return stats
            await asyncio.sleep(0.02)
            stats = await self.get_json("/stats")
        return stats

    async def release_of(self, request_id: str) -> dict:
        records = (await self.get_json("/debug/releases"))["releases"]
        matches = [r for r in records if r["request_id"] == request_id]
        assert len(matches) == 1, f"{request_id} released {len(matches)} times"
        return matches[0]


@contextmanager
def live_server(config: ServiceConfig, loaded):
    with running(InProcessServer(config, loaded)) as server:
        yield server


@contextmanager
def running(server: AppServer):
    server.start()
    try:
        yield server
    finally:
        server.stop()
