"""Live mode (harness.backend.Backend): `streamlab serve` in its own process on a free loopback
port, real sockets, and a real toxiproxy-server of the run's own for groups with network
conditions (one proxy per group, toxics set before any client connects).

Times: the harness clock is the event loop's (CLOCK_MONOTONIC), as is the server's hub clock,
so client closes and server releases are on one time line; both are shifted to start at 0.
"""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager

from harness.backend import ServerBooks
from harness.faults import Faults, ProxyHandle, ToxiproxyServer, find_binary
from harness.live import ServerProcess
from harness.plan import PlannedClient
from harness.rawhttp import RawExchange
from harness.scenario import Scenario, Sleeper

RUN_DEADLINE_S = 600.0


def needs_proxy(scenario: Scenario) -> bool:
    return any(g.network and not g.network.direct for g in scenario.groups)


def live_unavailable(scenario: Scenario | None = None) -> str | None:
    if (scenario is None or needs_proxy(scenario)) and find_binary() is None:
        return "toxiproxy-server is not installed: run `scripts/dev setup`"
    return None


async def _toggle(faults: Faults, handle: ProxyHandle, at_s: float, for_s: float) -> None:
    await asyncio.sleep(at_s)
    await asyncio.to_thread(faults.set_enabled, handle, False)
    await asyncio.sleep(for_s)
    await asyncio.to_thread(faults.set_enabled, handle, True)


class LiveServer:
    """One scenario's server process and proxies (harness.backend.Server)."""

    def __init__(self, process: ServerProcess, proxies: dict[str, ProxyHandle]) -> None:
        self.process, self.proxies = process, proxies
        self.loop = asyncio.get_running_loop()
        self.base = self.loop.time()
        self.books: ServerBooks | None = None  # what collect() saw; the shutdown adds its own findings

    def clock(self) -> float:
        return self.loop.time() - self.base

    def opener_for(self, pc: PlannedClient):
        port = self.proxies[pc.group.name].listen_port if pc.group.name in self.proxies else self.process.port
        behaviour = pc.group.behaviour
        rcvbuf = behaviour.recv_buffer_bytes if isinstance(behaviour, Sleeper) else None

        async def opener(path: str, body, headers):
            return await RawExchange.open("127.0.0.1", port, "POST", path, body, headers=headers, rcvbuf=rcvbuf)
        return opener

    async def settle(self, drain_s: float) -> None:
        await self.process.settle(drain_s)

    async def collect(self) -> ServerBooks:
        stats = await self.process.get_json("/stats")
        releases = await self.process.get_json("/debug/releases")
        stats["closed_streams"] = releases.get("closed_streams", [])  # peak queue per stream
        invariants = (await self.process.get_json("/debug/invariants"))["violations"]
        steps = (await self.process.get_json("/debug/steps"))["steps"]
        for r in releases["releases"]:
            r["released_at"] -= self.base
            if r["closed_at"] is not None:
                r["closed_at"] -= self.base
        for s in steps:
            s["began"] -= self.base
        self.books = ServerBooks(stats, releases["releases"], invariants, releases["ledger_problems_when_idle"],
                                 steps, stats.get("failure"))
        return self.books


class LiveBackend:
    """Real processes and sockets; each run starts (and stops) its own server and Toxiproxy."""
    mode = "live"

    def run(self, main):
        return asyncio.run(asyncio.wait_for(main, RUN_DEADLINE_S))

    @asynccontextmanager
    async def serving(self, scenario: Scenario):
        loop = asyncio.get_running_loop()
        process = ServerProcess(scenario.server.serve_args() + ["--log-level", "warning"])
        await process.start()
        toxiproxy: ToxiproxyServer | None = None
        faults: Faults | None = None
        toggles: list[asyncio.Task] = []
        server: LiveServer | None = None
        try:
            proxies: dict[str, ProxyHandle] = {}
            if needs_proxy(scenario):
                toxiproxy = await asyncio.to_thread(ToxiproxyServer().start)
                faults = Faults(toxiproxy)
                for g in scenario.groups:
                    if g.network and not g.network.direct:
                        proxies[g.name] = await asyncio.to_thread(faults.create_proxy, f"{scenario.name}__{g.name}",
                                                                  process.port, g.network.toxics)
            server = LiveServer(process, proxies)  # the run's clock starts now
            for g in scenario.groups:
                for down in (g.network.down if g.network and g.name in proxies else []):
                    toggles.append(loop.create_task(_toggle(faults, proxies[g.name], down.at_s, down.for_s)))
            yield server
            for t in toggles:
                await t
        finally:
            for t in toggles:
                t.cancel()
            code = process.stop()
            if faults is not None:
                faults.close()
            if toxiproxy is not None:
                toxiproxy.stop()
            books = server.books if server is not None else None
            if books is not None:
                if code not in (None, 0, -15):
                    books.notes.append(f"streamlab serve exited with {code}: {process.log_tail()}")
                if "NOT CLEAN" in process.log_tail(50):
                    books.invariants.append("server reported an unclean engine at shutdown")
