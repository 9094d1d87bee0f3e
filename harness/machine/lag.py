"""The event loop's lag: how late a short sleep wakes. A loop busy with clients' reads wakes it
late, so its percentiles say how far behind the loop runs. One probe for a shard worker's report
(harness.live.shards) and the harness benchmarks (benchmarks/harness_speed.py, harness_capacity.py)."""

from __future__ import annotations

import asyncio
import time

from harness.record.trace import percentile


class LoopLag:
    """`async with LoopLag(period_s) as lag:` samples the running loop's lag until the block ends."""

    def __init__(self, period_s: float, clock=time.monotonic) -> None:
        self.period_s = period_s
        self.clock = clock  # the run's clock where it is not time.monotonic (a live server's offset)
        self.lags: list[float] = []
        self._task: asyncio.Task | None = None

    async def _watch(self) -> None:
        while True:
            t = self.clock()  # not loop.time(): uvloop's counts whole ms (harness.live.loops)
            await asyncio.sleep(self.period_s)
            self.lags.append(self.clock() - t - self.period_s)

    async def __aenter__(self) -> "LoopLag":
        self._task = asyncio.get_running_loop().create_task(self._watch())
        return self

    async def __aexit__(self, *exc) -> None:
        assert self._task is not None
        self._task.cancel()
        try:
            await self._task
        except asyncio.CancelledError:
            pass

    def ms(self, q: float) -> float:
        """The q-th percentile of the lags sampled, in milliseconds (0 with none)."""
        value = percentile(self.lags, q)
        return round(value * 1e3, 2) if value is not None else 0.0

    def max_ms(self) -> float:
        return round(max(self.lags, default=0.0) * 1e3, 2)
