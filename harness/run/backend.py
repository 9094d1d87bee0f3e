"""What the one runner needs from a mode: a server to aim clients at, and its books afterwards.

    runner.run_scenario -> Backend.run(main) -> async with Backend.serving(scenario) as server:
                              launch(clients over server.opener_for) ; server.settle() ; server.collect()

harness/sim/backend.py (SimBackend: the app on virtual time) and harness/live/backend.py
(LiveBackend: `streamlab serve` and Toxiproxy on real sockets) implement it. Neither imports
the runner, and the runner imports neither's internals.
"""

from __future__ import annotations

from collections.abc import Coroutine
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol

from harness.clients.client import Opener
from harness.clients.plan import PlannedClient
from harness.format.scenario import Scenario
from harness.machine.drift import EngineReadings
from harness.record.trace import ServerBooks
from harness.clients.wire import Wire


class Server(Protocol):
    wire: Wire  # how clients speak to this server's API

    def clock(self) -> float: ...  # the harness clock: seconds since the run began
    def opener_for(self, planned: PlannedClient) -> Opener: ...
    async def settle(self, drain_s: float) -> None: ...  # until nothing runs, waits or is registered (bounded)
    # The books; with readings (harness.judge.timing.EngineReadings), also the drift check's timing of
    # the engine alone (a run that is judged: a probe, a baseline or a paced simulation is not,
    # and skips its seconds).
    async def collect(self, readings: EngineReadings | None = None) -> ServerBooks: ...
    # Identity references run through this server (None: the runner runs its own engine alone).
    async def references(self, planned: list[PlannedClient], records: list) -> dict | None: ...


class Backend(Protocol):
    mode: str
    run_deadline_s: float | None  # clients still running this long after the last planned arrival are stopped
    sharding: object | None  # harness.live.shards.Sharding: the clients over worker processes (live only); None: here

    def run(self, main: Coroutine[Any, Any, Any]) -> Any: ...  # on the event loop this mode needs
    def serving(self, scenario: Scenario) -> AbstractAsyncContextManager[Server]: ...
