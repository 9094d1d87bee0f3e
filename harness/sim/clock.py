"""Clocks. The simulation runs asyncio on virtual time: no sleep ever waits.

VirtualTimeLoop is an asyncio event loop whose time() is virtual and whose selector, when
nothing is ready, advances that time straight to the next timer instead of blocking. The
simulation uses no sockets and no threads, so a wait can only ever be for a timer; a wait
for nothing at all is a deadlock and raises. Time only moves forward.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import selectors


class SimulationDeadlock(RuntimeError):
    pass


class _VirtualSelector(selectors.DefaultSelector):
    def __init__(self, loop: "VirtualTimeLoop") -> None:
        super().__init__()
        self._loop = loop

    def select(self, timeout: float | None = None):
        # asyncio's self-pipe is registered here; nothing else is, and no thread writes to it.
        ready = super().select(0)
        if ready or timeout == 0:
            return ready
        if timeout is None:
            raise SimulationDeadlock("every task is waiting and no timer is set: the simulation cannot advance")
        self._loop.advance(timeout)
        return []


class _OrderedTimer(asyncio.TimerHandle):
    """A timer that, due at the same virtual moment as another, runs in the order it was set.
    asyncio's heap orders timers by time alone, so equal times pop in the heap's order: a burst
    of requests sent at one moment reached the server's one core shuffled (the second of two
    readers served sixth), where live a burst is served in the order it was sent."""
    __slots__ = ("_order",)

    def __lt__(self, other) -> bool:
        return (self._when, self._order) < (other._when, other._order)

    def __le__(self, other) -> bool:
        return (self._when, self._order) <= (other._when, other._order)

    def __gt__(self, other) -> bool:
        return (self._when, self._order) > (other._when, other._order)

    def __ge__(self, other) -> bool:
        return (self._when, self._order) >= (other._when, other._order)


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    def __init__(self, start: float = 0.0) -> None:
        self._virtual_now = start
        self._timers_set = itertools.count()
        super().__init__(_VirtualSelector(self))

    def call_at(self, when, callback, *args, context=None):
        """asyncio's call_at, with a timer that keeps the order timers were set in (_OrderedTimer)."""
        if when is None:
            raise TypeError("when cannot be None")
        self._check_closed()
        timer = _OrderedTimer(when, callback, args, self, context)
        timer._order = next(self._timers_set)
        heapq.heappush(self._scheduled, timer)
        timer._scheduled = True
        return timer

    def time(self) -> float:
        return self._virtual_now

    def now(self) -> float:
        return self._virtual_now

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("virtual time never goes backwards")
        self._virtual_now += seconds


def run_virtual(coro, start: float = 0.0):
    """Run a coroutine to completion on a fresh VirtualTimeLoop."""
    loop = VirtualTimeLoop(start)
    try:
        return loop.run_until_complete(coro)
    finally:
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()
