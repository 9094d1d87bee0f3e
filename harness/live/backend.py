"""Live mode (harness.run.backend.Backend): `streamlab serve` (or a target: another server) in its
own process on a free loopback port, real sockets, and a real toxiproxy-server of the run's own
for groups with network conditions (one proxy per group, toxics set before any client connects).

Times: the harness clock is the event loop's (CLOCK_MONOTONIC), as is the server's hub clock,
so client closes and server releases are on one time line; both are shifted to start at 0.
"""

from __future__ import annotations

import asyncio
import atexit
import time
from contextlib import asynccontextmanager
from pathlib import Path

from harness.machine.drift import EngineReadings, same_engine
from harness.record.trace import ServerBooks
from harness.live.toxiproxy import ToxiproxyClient, ProxyHandle, ToxiproxyServer, find_binary
from harness.clients.client import raw_opener
from harness.machine.reach import Origin
from harness.live.process import RunningServer, ServerProcess, target_process
from harness.live.loops import run_on_live_loop
from harness.live.nginx import Nginx, ensure_certificate, nginx_unavailable
from harness.clients.plan import PlannedClient
from harness.machine.cost_model import load_profile
from harness.format.scenario import ProxySpec, Scenario
from harness.targets.watch import TargetWatch
from harness.format.target import TARGETS, Target
from harness.clients.wire import Wire, bearer, wire_for
from streamlab.quiet_gc import quiet_collector

RUN_DEADLINE_S = 600.0
EXPORTS = Path("results") / "targets"  # models exported for targets that load transformers folders


def proxied(scenario: Scenario, every_group: bool = False) -> list:
    """The groups whose clients go through Toxiproxy: those with network conditions, or, on an
    external target (every_group), every group not marked direct."""
    return [g for g in scenario.groups
            if (g.network and not g.network.direct) or (every_group and not (g.network and g.network.direct))]


def needs_proxy(scenario: Scenario) -> bool:
    return bool(proxied(scenario))


def live_unavailable(scenario: Scenario | None = None, target: Target | None = None) -> str | None:
    """Why a live run cannot happen here (None: it can). Another target always needs Toxiproxy."""
    external = target is not None and not target.default
    if (scenario is None or external or needs_proxy(scenario)) and find_binary() is None:
        return "toxiproxy-server is not installed: run `scripts/dev setup`"
    if scenario is not None and scenario.server.proxy is not None:
        return nginx_unavailable()
    if external:
        from harness.targets.engines import binaries_missing
        return binaries_missing(target.uses)
    return None


async def _answers(endpoint) -> bool:
    try:
        return await endpoint.is_healthy()
    except (OSError, asyncio.TimeoutError, ValueError, KeyError):
        return False


async def _toggle(faults: ToxiproxyClient, handle: ProxyHandle, at_s: float, for_s: float) -> None:
    await asyncio.sleep(at_s)
    await asyncio.to_thread(faults.set_enabled, handle, False)
    await asyncio.sleep(for_s)
    await asyncio.to_thread(faults.set_enabled, handle, True)


async def _window(faults: ToxiproxyClient, handle: ProxyHandle, name: str, window) -> None:
    await asyncio.sleep(window.at_s)
    await asyncio.to_thread(faults.add_toxic, handle, name, window.toxic)
    await asyncio.sleep(window.for_s)
    await asyncio.to_thread(faults.remove_toxic, handle, name)


class LiveServer:
    """One scenario's server (ours, or a target) and its proxies (harness.run.backend.Server)."""

    def __init__(self, endpoint, proxies: dict[str, ProxyHandle], wire: Wire, target: Target,
                 front_port: int | None = None, proxy: ProxySpec | None = None, model: str | None = None) -> None:
        self.endpoint, self.proxies, self.wire, self.target = endpoint, proxies, wire, target
        self.model = model  # our own server's model: its steps are timed against that model's profile
        # What our server's engine speed depends on (harness.judge.timing.EngineReadings reuses a reading by it).
        self.same_engine: tuple | None = None
        self.front_port = front_port or endpoint.port  # where clients connect: nginx, or the server itself
        # The server as its clients name it: a proxied client connects to its Toxiproxy listener and
        # still speaks to this origin (its Host header; TLS checked against its name).
        self.origin = endpoint.origin if front_port in (None, endpoint.port) else Origin("127.0.0.1", self.front_port)
        self.proxy = proxy
        self.base = time.monotonic()
        self.books: ServerBooks | None = None  # what collect() saw; the shutdown adds its own findings
        self.watch = TargetWatch(self) if not target.default else None

    def clock(self) -> float:
        return time.monotonic() - self.base  # not loop.time(): uvloop's counts whole ms (harness.live.loops)

    def port_for(self, group: str) -> int:
        """Where a group's clients connect: its Toxiproxy listener, or the front (nginx, or the server)."""
        return self.proxies[group].listen_port if group in self.proxies else self.front_port

    def host_for(self, group: str) -> str:
        """The host a group's clients connect to: Toxiproxy's (this machine), or the origin's."""
        return "127.0.0.1" if group in self.proxies else self.origin.host

    def opener_for(self, pc: PlannedClient):
        port = self.port_for(pc.group.name)
        if self.proxy is not None and self.proxy.http2:
            ca_file = ensure_certificate()[0]

            async def h2_opener(path: str, body, headers):
                from harness.clients.h2client import H2Exchange  # h2: the test extra's (HTTP/2 through nginx)

                return await H2Exchange.open("127.0.0.1", port, "POST", path, body, headers=headers, ca_file=ca_file)
            return h2_opener
        return raw_opener(port, pc.group.behaviour, origin=self.origin, host=self.host_for(pc.group.name))

    async def settle(self, drain_s: float) -> None:
        if self.target.profile_spec.native_books:
            await self.endpoint.settle(drain_s)
        if self.watch is not None:
            await self.watch.settle(drain_s)

    async def collect(self, readings: EngineReadings | None = None) -> ServerBooks:
        if self.target.profile_spec.native_books:
            books = await self._native_books(readings)
        else:
            books = ServerBooks(server={}, releases=[], invariants=[], ledger_problems=[])
        if self.watch is not None:
            books.target = await self.watch.finish()
        self.books = books
        return books

    async def references(self, planned, records) -> dict[int, list[int] | str] | None:
        """Identity references run alone through the same target; None: the runner's own engine."""
        if self.watch is None or self.target.profile_spec.native_books:
            return None
        return await self.watch.solo(planned, records)

    async def _native_books(self, readings: EngineReadings | None) -> ServerBooks:
        endpoint = self.endpoint
        stats = await endpoint.get_json("/stats")
        releases = await endpoint.get_json("/debug/releases")
        stats["closed_streams"] = releases.get("closed_streams", [])  # peak queue per stream
        invariants = (await endpoint.get_json("/debug/invariants"))["violations"]
        steps = (await endpoint.get_json("/debug/steps"))["steps"]
        for r in releases["releases"]:
            r["released_at"] -= self.base
            if r["closed_at"] is not None:
                r["closed_at"] -= self.base
        for s in steps:
            s["began"] -= self.base
        return ServerBooks(server=stats, releases=releases["releases"], invariants=invariants,
                           ledger_problems=releases["ledger_problems_when_idle"], steps=steps,
                           failure=stats.get("failure"), step_timing=await self._step_timing(readings) if readings is not None else {})

    async def _step_timing(self, readings: EngineReadings) -> dict:
        """The server's engine alone, paired with the yardstick, timed by the server after the run
        (its /debug/engine-speed), for the drift check (harness.judge.timing.drift)."""
        if self.model is None:
            return {}
        try:
            profile = load_profile(self.model)
        except FileNotFoundError:
            return {}
        loop = asyncio.get_running_loop()

        def engine_speed() -> dict:  # on a worker thread: the server answers on the loop
            return asyncio.run_coroutine_threadsafe(self.endpoint.get_json("/debug/engine-speed", 60.0),
                                                    loop).result(90.0)
        return await asyncio.to_thread(readings.measure, engine_speed, profile, self.same_engine)


class LiveBackend:
    """Real processes and sockets; each run starts (and stops) its own server and Toxiproxy.

    With a target, the clients aim at that server instead (started from its command, or one
    already running at its URL), through the same Toxiproxy, speaking its API. A command
    target's server is kept from one run to the next while its model and batch size stay the
    same (vLLM takes 30-40 s to start): a suite or a test module starts it once. It is started
    again when it has died or stopped answering its health route, so a crash one scenario causes
    is that scenario's finding and not the next one's."""

    def __init__(self, target: Target | None = None, source: Path | None = None) -> None:
        self.target = target or TARGETS["streamlab"]
        self.source = source  # our server's code from this folder, started as its own process (ServerProcess)
        # Real seconds after the last planned arrival that clients may still run (harness.clients.client.launch);
        # None: only RUN_DEADLINE_S over the whole run.
        self.run_deadline_s: float | None = None
        self.sharding = None  # harness.live.shards.Sharding: the clients over Ray workers; None: in this process
        self.mode = "live" if self.target.default else f"live@{self.target.name}"
        self._kept: tuple[tuple[str, int], object, str] | None = None  # (model, batch), server, its model name
        atexit.register(self.close)

    def close(self) -> None:
        """Stop the kept server, if any (at the end of a suite, a test module, or the process)."""
        if self._kept is not None:
            self._kept[1].stop()
            self._kept = None

    def kept_key(self, scenario: Scenario) -> tuple[str, int] | None:
        """What a command target's server is started with for this scenario (the model, and the
        batch size where the command takes it): runs with the same key share one server. None
        where nothing is kept (our own server, a URL)."""
        if self.target.command is None:
            return None
        sized = self.target.uses("max_batch") or self.target.uses("context")
        return self.target.serves or scenario.server.model, scenario.server.max_batch if sized else 0

    async def _started(self, scenario: Scenario):
        """The run's server, started (or the kept one, still healthy), and the model its requests name."""
        if self.target.command is None:
            endpoint, model = self._endpoint(scenario)
            await endpoint.start()
            return endpoint, model
        key = self.kept_key(scenario)
        if self._kept is not None:
            kept_key, endpoint, model = self._kept
            if kept_key == key and endpoint.alive() and await _answers(endpoint):
                return endpoint, model
            self.close()
        endpoint, model = self._endpoint(scenario)
        await endpoint.start()
        self._kept = (key, endpoint, model)
        return endpoint, model

    def server_for(self, scenario: Scenario) -> tuple[Origin, str | None]:
        """The target's server as this scenario's run would have it (the kept one, or started and
        kept), for requests outside any run (`streamlab target probe` in the peer tests): where it
        is, and the model its requests name."""
        endpoint, model = run_on_live_loop(self._started(scenario))
        return endpoint.origin, model

    def _done_with(self, endpoint) -> int | None:
        """After a run: our server and a URL's are stopped (theirs: a no-op); a kept one only if it died."""
        if self._kept is not None and self._kept[1] is endpoint:
            if endpoint.alive():
                return None
            self._kept = None
        return endpoint.stop()

    def run(self, main):
        # The clients' own garbage collector would pause them mid-run (streamlab.quiet_gc); the
        # server's process keeps its collector.
        with quiet_collector():
            return run_on_live_loop(asyncio.wait_for(main, RUN_DEADLINE_S))

    def _endpoint(self, scenario: Scenario):
        t = self.target
        if t.own_server:
            # A server from another revision gets only the options the scenario wrote: this tree's
            # defaults would hide a change of default, and an option it lacks would refuse to start.
            args = scenario.server.serve_args(only_written=self.source is not None) + ["--log-level", "warning"]
            return ServerProcess(args, source=self.source), scenario.server.model
        if t.url is not None:
            return RunningServer(t.origin, t.health), t.model
        return target_process(t, t.serves or scenario.server.model, scenario.server.max_batch, EXPORTS)

    @asynccontextmanager
    async def serving(self, scenario: Scenario):
        loop = asyncio.get_running_loop()
        endpoint, model = await self._started(scenario)
        nginx: Nginx | None = None
        toxiproxy: ToxiproxyServer | None = None
        faults: ToxiproxyClient | None = None
        toggles: list[asyncio.Task] = []
        server: LiveServer | None = None
        try:
            if model is None:  # a running server: ask it what it serves
                model = (await endpoint.get_json("/v1/models", headers=bearer(self.target.api_key)))["data"][0]["id"]
            profile = self.target.profile_spec
            key = scenario.server.api_key if self.target.own_server else self.target.api_key
            wire = wire_for(self.target.api, model, profile.request_extra, profile.ignore_eos, key, profile.fields)
            front = endpoint.port
            upstream: int | str = endpoint.origin.authority
            spec = scenario.server.proxy
            if spec is not None and (endpoint.origin.host != "127.0.0.1" or endpoint.origin.tls is not None):
                raise RuntimeError(f"{scenario.name}: an nginx front (server.proxy) stands before a plain http "
                                   f"server on 127.0.0.1, not {endpoint.origin.authority}")
            if spec is not None:  # nginx between Toxiproxy and the server
                nginx = await asyncio.to_thread(Nginx(endpoint.port, spec.tls, spec.http2, spec.read_timeout_s,
                                                      spec.honour_accel_buffering, spec.buffering).start)
                front = upstream = nginx.port
            proxies: dict[str, ProxyHandle] = {}
            # Another server than the scenario's own always sits behind Toxiproxy, toxics or not.
            groups = proxied(scenario, every_group=not self.target.default)
            if groups:
                toxiproxy = await asyncio.to_thread(ToxiproxyServer().start)
                faults = ToxiproxyClient(toxiproxy)
                proxies = await asyncio.to_thread(faults.proxy_groups, scenario.name, groups, upstream)
            server = LiveServer(endpoint, proxies, wire, self.target, front, spec,
                                scenario.server.model if self.target.own_server else None)
            if self.target.own_server:
                server.same_engine = same_engine("live", scenario.server)
            if server.watch is not None:
                await server.watch.begin(scenario)  # the capacity probe, then the gauge poller
            server.base = time.monotonic()  # the run's clock starts now
            for g in scenario.groups:
                for down in (g.network.down if g.network and g.name in proxies else []):
                    toggles.append(loop.create_task(_toggle(faults, proxies[g.name], down.at_s, down.for_s)))
                for i, window in enumerate(g.network.windows if g.network and g.name in proxies else []):
                    toggles.append(loop.create_task(_window(faults, proxies[g.name], f"window_{i}", window)))
            yield server
            for t in toggles:
                await t
        finally:
            for t in toggles:
                t.cancel()
            if server is not None and server.watch is not None:
                server.watch.cancel()
            code = self._done_with(endpoint)
            if nginx is not None:
                nginx.stop()
            if faults is not None:
                faults.close()
            if toxiproxy is not None:
                toxiproxy.stop()
            books = server.books if server is not None else None
            if books is not None:
                if code not in (None, 0, -15):
                    books.notes.append(f"{endpoint.name} exited with {code}: {endpoint.log_tail()}")
                if "NOT CLEAN" in endpoint.log_tail(50):
                    books.invariants.append("server reported an unclean engine at shutdown")
