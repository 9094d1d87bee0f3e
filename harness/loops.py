"""The event loop a live harness process runs its clients on: uvloop's (libuv's, in C) where it
is installed, asyncio's own where not. Measured against asyncio's on the capacity benchmark
(docs/RESULTS.md, "Harness capacity"): at 1,024 streams, the harness's CPU per event fell and its
reads came back sooner, so fewer reads took several events.

uvloop's loop.time() counts whole milliseconds, so live clocks read time.monotonic(), which is
the same clock as asyncio's loop.time() (and as a Ray worker's offset exchange), at full
resolution. The simulation keeps its own loop (harness.clock.VirtualTimeLoop)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine


def live_loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def run_live(main: Coroutine, loop_factory: Callable[[], asyncio.AbstractEventLoop] | None | str = "live"):
    """asyncio.run(main) on the live harness's loop (or on `loop_factory`'s; None: asyncio's own)."""
    with asyncio.Runner(loop_factory=live_loop_factory() if loop_factory == "live" else loop_factory) as runner:
        return runner.run(main)
