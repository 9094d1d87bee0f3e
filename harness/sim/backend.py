"""The real hub and Starlette app on virtual time, behind a simulated ASGI server. No sockets.

The engine runs for real (so tokens, identity and releases are real); time advances by the
step-cost profile. The simulated connection models what the chapter measured: the server's
writes are accepted until about a quarter megabyte waits unread, then block; bytes arrive
after the group's latency at its bandwidth; a client's FIN or RST reaches the app as
`http.disconnect`, after which writes return silently (as uvicorn's do).
"""

from __future__ import annotations

import asyncio

from contextlib import asynccontextmanager

from harness.sim.server import SimServer, SimStepClock, drive
from harness.sim.transport import ServerCore
from harness.machine.drift import same_engine
from harness.sim.clock import run_virtual
from harness.machine.cores import server_threads, torch_threads
from harness.clients.plan import loaded_model
from harness.machine.cost_model import StepCostProfile, load_profile
from harness.format.scenario import Scenario
from streamlab.app import create_app
from streamlab.engine.faults import FaultPlan



class SimBackend:
    """The real app, hub and engine behind simulated connections, on a virtual clock."""
    mode = "sim"

    def __init__(self, *profiles: StepCostProfile, run_deadline_s: float | None = None) -> None:
        self.profiles = {p.model: p for p in profiles}  # others: the model's profile in scenarios/profiles/
        # Virtual seconds after which clients still waiting are stopped (harness.clients.client.launch):
        # the swarm's, whose drawn scenarios may meet a stream that never ends. None: no limit.
        self.run_deadline_s = run_deadline_s
        self.sharding = None  # virtual time is one process's: a simulation is never sharded

    def profile(self, model: str) -> StepCostProfile:
        return self.profiles.get(model) or load_profile(model)

    def run(self, main):
        # The real steps run with the torch threads the profile's engine terms were measured with
        # (a live server's, harness.machine.cores); on torch's default the drift check read 2.4x at overlap_8.
        with torch_threads(server_threads()):
            return run_virtual(main)

    @asynccontextmanager
    async def serving(self, scenario: Scenario):
        profile = self.profile(scenario.server.model)
        loop = asyncio.get_running_loop()
        app = create_app(scenario.server.service_config(), loaded_model(scenario.server.model), clock=loop.time,
                         threaded=False)
        async with app.router.lifespan_context(app) as state:
            clock = SimStepClock(profile, ServerCore())
            slow = scenario.server.lab_step_slowdown
            server = SimServer(app, state, profile, clock, scenario.server.api_key,
                               FaultPlan(step_slowdown=slow) if slow != 1 else None)
            server.same_engine = same_engine("sim", scenario.server)
            driver = loop.create_task(drive(state["hub"], clock))
            try:
                yield server
            finally:
                driver.cancel()
                for t in server.exchanges:
                    t.cancel()
                await asyncio.gather(driver, *server.exchanges, return_exceptions=True)
