"""Running the app under uvicorn with streamlab's graceful shutdown.

On SIGTERM/SIGINT: the hub stops admitting at once (new requests get 503), running streams
may finish for --graceful-timeout seconds, then the rest end with an `error` event of type
`shutting_down`. Streams must end here, not in lifespan shutdown: uvicorn runs that only
after every connection has closed.
"""

from __future__ import annotations

import sys

import uvicorn
from starlette.applications import Starlette

from streamlab.app import create_app
from streamlab.config import ServiceConfig

# uvicorn's own wait for connections, past our grace period: time for the error events to go out.
FLUSH_MARGIN_S = 5.0
SWITCH_INTERVAL_S = 0.001


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


def serve(config: ServiceConfig, host: str, port: int, log_level: str = "info") -> None:
    # The step thread runs Python between its tensor operations; with the default 5 ms switch
    # interval it waited that long for the GIL whenever the event loop held it.
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    app = create_app(config)
    uv_config = uvicorn.Config(app, host=host, port=port, log_level=log_level, lifespan="on",
                               timeout_graceful_shutdown=config.graceful_timeout_s + FLUSH_MARGIN_S)
    GracefulServer(uv_config, app, config.graceful_timeout_s).run()
