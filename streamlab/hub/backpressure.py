"""Backpressure's actions: what the policy decided (streamlab/policies.py) done to a stream.

Pause and resume the sequence in the engine, or end the stream as a slow client; a ticker checks
streams at their limit while no new events arrive, since a drop needs time to pass.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from streamlab.engine.engine import BatchEngine
from streamlab.hub.step_clock import Clock
from streamlab.hub.streams import Stream
from streamlab.policies import Action, BackpressureConfig, backpressure


class Backpressure:
    """Mixed into the Hub; the attributes below are the hub's, read here."""
    cfg: BackpressureConfig
    engine: BatchEngine
    clock: Clock
    _streams: dict[str, Stream]

    _end_with_error: Callable[[Stream, str, str], None]  # the hub's
    _wake: Callable[[], None]  # the hub's

    def _apply_backpressure(self, stream: Stream) -> None:
        if stream.finished or stream.closed:
            return
        now = self.clock()
        decision = backpressure(self.cfg, len(stream.queue), stream.paused, stream.at_limit_since, now,
                                stream.client_stalled_s(now))
        stream.at_limit_since = decision.at_limit_since
        if decision.at_limit_since is None:
            stream.stalled_s = 0.0
        if decision.action is Action.PAUSE:
            stream.paused = True
            self.books.counters["streams_paused"] += 1
            self.engine.pause(stream.request_id)
        elif decision.action is Action.RESUME:
            stream.paused = False
            self.engine.resume(stream.request_id)
            self._wake()
        elif decision.action is Action.DROP:
            self._end_with_error(stream, "slow_client",
                                 f"the client held the stream {self.cfg.queue_limit} events behind for over "
                                 f"{self.cfg.stall_timeout_s} s")

    async def _stall_ticker(self) -> None:
        # Drop decisions need time to pass with no new events, so they are also checked here.
        period = min(self.cfg.stall_timeout_s / 4, 0.05)
        while True:
            await asyncio.sleep(period)
            for stream in list(self._streams.values()):
                if stream.at_limit_since is not None:
                    self._apply_backpressure(stream)
