"""The real hub and Starlette app on virtual time, behind a simulated ASGI server: the step
loop driven by the cost profile, and each connection served as uvicorn would (harness/sim/transport.py).
"""

from __future__ import annotations

import asyncio
import json

from harness.sim.transport import ServerCore, SimConnection, sim_network
from harness.machine.drift import EngineReadings
from harness.record.trace import ServerBooks
from harness.clients.plan import PlannedClient
from harness.machine.cost_model import StepCostProfile
from harness.clients.wire import StreamlabWire
from streamlab.bench_step import engine_speed
from streamlab.engine.faults import FaultPlan
from streamlab.engine.outputs import StepOutput
from streamlab.hub import Hub
from streamlab.idle import drained
from streamlab.hub.step_clock import Wait



SETTLE_POLL_S = 0.01


class SimStepClock:
    """The hub's step loop on virtual time: a step begins when the server's core is free and
    costs what the profile says (the real CPU time each step took is in the hub's step log, for
    the drift check)."""

    def __init__(self, profile: StepCostProfile, core: ServerCore) -> None:
        self.profile, self.core = profile, core
        self.loop = asyncio.get_running_loop()
        self._t = 0.0

    def begin(self) -> float:
        self._t = max(self.loop.time(), self.core.busy_until)
        return self._t

    def done(self, part: StepOutput) -> float:
        self._t += self.profile.served_cost(part)
        return self._t

    def end(self, out: StepOutput) -> float:
        at = self.done(out)
        self.core.busy_until = self._t = at
        return at

    def post(self, at: float, fn, *args) -> None:
        self.loop.call_at(at, fn, *args)

    def cpu_waited(self) -> float:
        return 0.0  # virtual time waits for no CPU


async def drive(hub: Hub, clock: SimStepClock) -> None:
    """The hub's own step loop (Hub.step_loop), awaited on virtual time instead of blocking a thread."""
    loop = asyncio.get_running_loop()
    wake = asyncio.Event()
    hub.wake_with(wake.set)
    try:
        for wait, out, end in hub.step_loop(clock):
            if wait is Wait.IDLE:
                wake.clear()
                if not hub.engine.has_work():
                    await wake.wait()
                continue
            await asyncio.sleep(max(0.0, end - loop.time()))
            if wait is Wait.READERS:
                await hub.deliver_and_wait(out, end)
    except asyncio.CancelledError:
        raise
    except BaseException as exc:  # as the step thread does: recorded with its traceback, every stream ended
        hub.fail(exc)


class SimServer:
    """One scenario's app and hub on virtual time (harness.run.backend.Server)."""

    def __init__(self, app, state: dict, profile: StepCostProfile, clock: SimStepClock, api_key: str = "",
                 slowdown: FaultPlan | None = None) -> None:
        self.app, self.state, self.profile, self.step_clock = app, state, profile, clock
        self.slowdown = slowdown  # the lab's slower engine, for the engine's speed after the run
        # What the engine's speed depends on (harness.judge.timing.EngineReadings reuses a reading by it).
        self.same_engine: tuple | None = None
        self.wire = StreamlabWire(api_key=api_key)
        self.hub: Hub = state["hub"]
        self.loop = asyncio.get_running_loop()
        self.exchanges: list[asyncio.Task] = []

    def clock(self) -> float:
        return self.loop.time()

    def _idle(self) -> bool:
        return not self.hub.engine.has_work()

    def opener_for(self, pc: PlannedClient):
        latency, rate, up = sim_network(pc.group)
        rcvbuf = pc.group.behaviour.socket_rcvbuf

        async def opener(path: str, body, headers):
            # A bad request is one the server refuses while reading it: the profile's cost for a refusal.
            cost = self.profile.request_cost(refused=pc.group.behaviour.refused)
            conn = SimConnection(self.profile.buffer_bytes(rcvbuf), latency, rate, self.step_clock.core,
                                 cost, self.profile.request_latency_s,
                                 self.profile.read_window(rcvbuf), up, self._idle, self.profile.serving_per_byte_s,
                                 self.profile.client_per_byte_s)
            raw = body if isinstance(body, bytes) else json.dumps(body).encode()
            sent = dict(headers or {}) if isinstance(body, bytes) else {"content-type": "application/json",
                                                                         **(headers or {})}
            self.exchanges.append(self.loop.create_task(conn.serve(self.app, self.state, "POST", path, raw, sent)))
            return conn
        return opener

    async def settle(self, drain_s: float) -> None:
        deadline = self.clock() + drain_s
        while self.clock() < deadline:
            stats = self.hub.stats()
            if drained(stats) and all(t.done() for t in self.exchanges):
                return
            await asyncio.sleep(SETTLE_POLL_S)

    async def collect(self, readings: EngineReadings | None = None) -> ServerBooks:
        hub = self.hub
        steps = [r._asdict() for r in hub.books.step_log]
        # The engine alone on this run's code and lab slowdown, paired with the yardstick (harness.judge.timing.drift).
        step_timing = readings.measure(
            lambda: engine_speed(self.state["model"], hub.engine.config.decode_attention, self.slowdown),
            self.profile, self.same_engine) if readings is not None else {}
        return ServerBooks(server=hub.stats(), releases=[dict(vars(r)) for r in hub.books.releases],
                           invariants=hub.engine.check_invariants(), ledger_problems=hub.engine.check_released(),
                           steps=steps, failure=hub.failure_traceback, step_timing=step_timing)

    async def references(self, planned, records) -> None:
        return None  # the runner runs each request alone on its own engine
