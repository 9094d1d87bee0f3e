"""Live mode: `streamlab serve` in its own process, real sockets, and a real Toxiproxy for
groups with network conditions (one proxy per group, toxics set before any client connects).

Times: the harness clock is the event loop's (CLOCK_MONOTONIC), as is the server's hub clock,
so client closes and server releases are on one time line; both are shifted to start at 0.
"""

from __future__ import annotations

import asyncio
import atexit
import time

from harness.clients import StreamRecord, launch
from harness.faults import Faults, ProxyHandle, ToxiproxyServer, ToxiproxyUnavailable, find_binary
from harness.live import ServerProcess
from harness.rawhttp import RawExchange
from harness.report import Trace
from harness.scenario import Scenario, Sleeper

RUN_DEADLINE_S = 600.0
_shared: dict[str, object] = {}


def needs_proxy(scenario: Scenario) -> bool:
    return any(g.network and not g.network.direct for g in scenario.groups)


def live_unavailable(scenario: Scenario | None = None) -> str | None:
    if (scenario is None or needs_proxy(scenario)) and find_binary() is None:
        return "toxiproxy-server is not installed: run `scripts/dev setup`"
    return None


def shared_faults() -> Faults:
    """One toxiproxy-server per process (a test session), stopped at exit."""
    if "faults" not in _shared:
        server = ToxiproxyServer().start()
        atexit.register(server.stop)
        _shared["server"], _shared["faults"] = server, Faults(server)
    return _shared["faults"]  # type: ignore[return-value]


def stop_shared() -> None:
    faults, server = _shared.pop("faults", None), _shared.pop("server", None)
    if faults is not None:
        faults.close()
    if server is not None:
        server.stop()


def run_live(scenario: Scenario, progress=None):
    from harness.runner import model, plan

    planned = plan(scenario, model(scenario.server.model).tokenizer)
    t0 = time.perf_counter()
    trace = asyncio.run(asyncio.wait_for(_live(scenario, planned, progress), RUN_DEADLINE_S))
    trace.wall_s = time.perf_counter() - t0
    return trace, planned


async def _toggle(faults: Faults, handle: ProxyHandle, at_s: float, for_s: float) -> None:
    await asyncio.sleep(at_s)
    await asyncio.to_thread(faults.set_enabled, handle, False)
    await asyncio.sleep(for_s)
    await asyncio.to_thread(faults.set_enabled, handle, True)


async def _live(scenario: Scenario, planned, progress) -> Trace:
    loop = asyncio.get_running_loop()
    base = loop.time()

    def clock() -> float:
        return loop.time() - base

    records = [StreamRecord(pc.group.name, pc.index, pc.group.behaviour.kind, pc.prompt, pc.request) for pc in planned]
    server = ServerProcess(scenario.server.serve_args() + ["--log-level", "warning"])
    await server.start()
    faults: Faults | None = None
    try:
        proxies: dict[str, ProxyHandle] = {}
        toggles = []
        if needs_proxy(scenario):
            faults = shared_faults()
            await asyncio.to_thread(faults.reset)
            for g in scenario.groups:
                if g.network and not g.network.direct:
                    proxies[g.name] = await asyncio.to_thread(faults.create_proxy, f"{scenario.name}__{g.name}",
                                                              server.port, g.network.toxics)
        base = loop.time()  # the run starts now
        for g in scenario.groups:
            for down in (g.network.down if g.network and g.name in proxies else []):
                toggles.append(loop.create_task(_toggle(faults, proxies[g.name], down.at_s, down.for_s)))
        def opener_for(pc):
            port = proxies[pc.group.name].listen_port if pc.group.name in proxies else server.port
            behaviour = pc.group.behaviour
            rcvbuf = behaviour.recv_buffer_bytes if isinstance(behaviour, Sleeper) else None

            async def opener(path: str, body, headers):
                return await RawExchange.open("127.0.0.1", port, "POST", path, body, headers=headers, rcvbuf=rcvbuf)
            return opener

        await launch(planned, records, scenario, clock, opener_for, progress)
        end = clock()
        for t in toggles:
            await t
        stats = await server.settle(scenario.drain_s)
        releases = (await server.get_json("/debug/releases"))
        stats["closed_streams"] = releases.get("closed_streams", [])  # peak queue per stream
        invariants = (await server.get_json("/debug/invariants"))["violations"]
    finally:
        code = server.stop()
        if faults is not None:
            try:
                await asyncio.to_thread(faults.reset)  # no traffic now
            except ToxiproxyUnavailable:
                pass
    for r in releases["releases"]:
        r["released_at"] -= base
        if r["closed_at"] is not None:
            r["closed_at"] -= base
    notes = [] if code in (0, -15) else [f"streamlab serve exited with {code}: {server.log_tail()}"]
    if "NOT CLEAN" in server.log_tail(50):
        invariants = invariants + ["server reported an unclean engine at shutdown"]
    return Trace(scenario.name, "live", scenario.seed, scenario.model_dump(mode="json"), records, stats,
                 releases["releases"], invariants, releases["ledger_problems_when_idle"], duration_s=end, notes=notes)
