"""The event loop a live harness process runs its clients on: uvloop's (libuv's, in C) where it
is installed, asyncio's own where not. Measured against asyncio's on the capacity benchmark
(docs/RESULTS.md, "Harness capacity"): at 1,024 streams, the harness's CPU per event fell and its
reads came back sooner, so fewer reads took several events.

uvloop's loop.time() counts whole milliseconds, so live clocks read time.monotonic(), which is
the same clock as asyncio's loop.time() (and as a Ray worker's offset exchange), at full
resolution. The simulation keeps its own loop (harness.sim.clock.VirtualTimeLoop)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine


def live_loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def run_on_live_loop(main: Coroutine, uvloop: bool = True):
    """asyncio.run(main) on the live harness's loop (uvloop where installed); uvloop=False:
    asyncio's own (the capacity benchmark's comparison)."""
    with asyncio.Runner(loop_factory=live_loop_factory() if uvloop else None) as runner:
        return runner.run(main)
