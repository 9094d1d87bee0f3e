"""One run of a scenario, unjudged: its clients planned from the seed and run against a backend
(the simulation or a live server); the trace of what happened. The runner (harness/run/runner.py)
judges such runs; the references, the fit and the benchmarks make them too.
"""

from __future__ import annotations

import time

from harness.clients.client import launch
from harness.clients.plan import PlannedClient, plan, tokenizer_for
from harness.format.scenario import Scenario
from harness.live.backend import LiveBackend
from harness.machine.drift import EngineReadings
from harness.record.trace import StreamRecord, Trace
from harness.run import capacity
from harness.run.backend import Backend


def run_trace(scenario: Scenario, backend: Backend, progress=None,
              readings: EngineReadings | None = None) -> tuple[Trace, list[PlannedClient]]:
    """Run a scenario's clients against a backend's server; the trace of what happened. Load or
    SLOs stated relative to this machine are resolved first, by a probe through the same backend
    (harness.run.capacity). readings: the run is judged, so its server's engine is timed alone after
    it for the drift check, or a kept reading of the same engine reused (harness.judge.timing.EngineReadings;
    probes, baselines, paced simulations and the calibration's runs are not judged on drift and
    skip it)."""
    scenario, probes = capacity.resolve(scenario, lambda probe: run_trace(probe, backend)[0])
    planned = plan(scenario, tokenizer_for(scenario.server.model))
    records = [StreamRecord(pc.group.name, pc.index, pc.group.behaviour.kind, pc.prompt, pc.request) for pc in planned]

    async def main() -> Trace:
        async with backend.serving(scenario) as server:
            deadline = scenario.run_deadline_s or backend.run_deadline_s
            sharding, lag = backend.sharding, {}
            if sharding is not None:  # the clients over worker processes (harness.live.shards)
                await sharding.launch(planned, records, scenario, server, deadline)
            else:
                lag = await launch(planned, records, scenario, server.clock, server.opener_for, progress,
                                   server.wire, deadline, watch_lag=backend.mode == "live")
            end = server.clock()
            await server.settle(scenario.drain_s)
            books = await server.collect(readings)
            references = await server.references(planned, records)
        return Trace.of(books, scenario=scenario.name, mode=backend.mode, seed=scenario.seed,
                        spec=scenario, streams=records, duration_s=end,
                        references=references or {}, loop_lag_ms=lag,
                        workers=[r.summary() for r in sharding.reports] if sharding is not None else [])

    t0 = time.perf_counter()
    trace = backend.run(main())
    trace.wall_s = time.perf_counter() - t0
    trace.notes += [p.line() for p in probes]
    return trace, planned


def simulate(scenario: Scenario, progress=None) -> tuple[Trace, list[PlannedClient]]:
    """One simulated run, unjudged (benchmarks, tests)."""
    from harness.sim.backend import SimBackend

    return run_trace(scenario, SimBackend(), progress)


def run_live(scenario: Scenario, progress=None) -> tuple[Trace, list[PlannedClient]]:
    """One live run, unjudged (benchmarks, calibration)."""
    return run_trace(scenario, LiveBackend(), progress)
