"""Running the app under uvicorn with streamlab's graceful shutdown.

On SIGTERM/SIGINT: the hub stops admitting at once (new requests get 503), running streams
may finish for --graceful-timeout seconds, then the rest end with an `error` event of type
`shutting_down`. Streams must end here, not in lifespan shutdown: uvicorn runs that only
after every connection has closed.
"""

from __future__ import annotations

import asyncio
import sys

import uvicorn
from starlette.applications import Starlette

from streamlab.app import create_app
from streamlab.config import ServiceConfig
from streamlab.guard import guarded_h11

# uvicorn's own wait for connections, past our grace period: time for the error events to go out.
FLUSH_MARGIN_S = 5.0
SWITCH_INTERVAL_S = 0.001
BACKLOG = 4096  # connections waiting to be accepted (the kernel caps it at net.core.somaxconn)


class GracefulServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, app: Starlette, grace_s: float) -> None:
        super().__init__(config)
        self.app = app
        self.grace_s = grace_s

    def handle_exit(self, sig, frame) -> None:
        hub = getattr(self.app.state, "hub", None)  # set by the lifespan once the model is up
        if hub is not None and not hub.draining:
            hub.begin_shutdown(self.grace_s)
        super().handle_exit(sig, frame)
        if self._signalled is not None and not self._signalled[0].is_closed():
            self._signalled[0].call_soon_threadsafe(self._signalled[1].set)

    _signalled: tuple[asyncio.AbstractEventLoop, asyncio.Event] | None = None

    async def main_loop(self) -> None:
        """uvicorn's loop (0.55: a tick every 0.1 s for the date header, max requests and
        should_exit), woken at once by a signal: its tick had a signal wait 50 ms on average
        before shutdown began, paid by every stop of a server (hundreds in a test run)."""
        self._signalled = (asyncio.get_running_loop(), asyncio.Event())
        try:
            counter = 0
            while not await self.on_tick(counter):
                counter = (counter + 1) % 864000
                try:
                    async with asyncio.timeout(0.1):  # no task a tick, unlike wait_for
                        await self._signalled[1].wait()
                except TimeoutError:
                    pass
        finally:
            self._signalled = None


class AdminServer(uvicorn.Server):
    """The admin port: the same app, so the same hub; a signal stops the main server too."""

    def __init__(self, config: uvicorn.Config, main: GracefulServer) -> None:
        super().__init__(config)
        self.main = main

    def handle_exit(self, sig, frame) -> None:
        self.main.handle_exit(sig, frame)
        super().handle_exit(sig, frame)


def serve(config: ServiceConfig, host: str, port: int, log_level: str = "info",
          ssl_certfile: str | None = None, ssl_keyfile: str | None = None) -> None:
    """Serve until a signal; https where a certificate and its key are given (uvicorn's TLS)."""
    # The step thread runs Python between its tensor operations; with the default 5 ms switch
    # interval it waited that long for the GIL whenever the event loop held it.
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    app = create_app(config)
    # loop="asyncio": uvicorn's "auto" takes uvloop whenever it is installed (the harness's clients
    # run on it, harness/live/loops.py), which would change the server under test with the admin port
    # (served through asyncio.run) or without it; every figure of ours was measured on asyncio's.
    uv_config = uvicorn.Config(app, host=host, port=port, log_level=log_level, lifespan="on",
                               timeout_graceful_shutdown=config.graceful_timeout_s + FLUSH_MARGIN_S,
                               http=guarded_h11(config.header_timeout_s, config.max_head_bytes),
                               limit_concurrency=config.max_connections,
                               backlog=BACKLOG, loop="asyncio", ssl_certfile=ssl_certfile, ssl_keyfile=ssl_keyfile)
    main = GracefulServer(uv_config, app, config.graceful_timeout_s)
    if not config.admin_port:
        main.run()
        return
    asyncio.run(_serve_with_admin(main, app, config.admin_port, log_level))


async def _serve_with_admin(main: GracefulServer, app: Starlette, admin_port: int, log_level: str) -> None:
    """The main server, and once it is up (the model loaded, the hub running) the admin port on
    loopback, whose requests see the main server's lifespan state (its hub and metrics)."""
    async def admin_app(scope, receive, send):
        scope["state"] = dict(main.lifespan.state)
        await app(scope, receive, send)

    admin = AdminServer(uvicorn.Config(admin_app, host="127.0.0.1", port=admin_port, log_level=log_level,
                                       lifespan="off"), main)
    serving = asyncio.create_task(main.serve())
    while not main.started and not serving.done():
        await asyncio.sleep(0.05)
    if serving.done():
        await serving
        return
    admin_serving = asyncio.create_task(admin.serve())
    await serving
    admin.should_exit = True
    await admin_serving
