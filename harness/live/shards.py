"""One live run's clients sharded over worker processes, on one machine or many, with Ray (issue 25).

The coordinator (the process running the scenario) keeps everything but the clients: the server,
Toxiproxy, the books, the checks. Each worker is a Ray actor that gets the scenario, its seed and
its shard (the clients whose index in the plan is k modulo N), plans the scenario itself (the
plan is a function of the scenario and its seed alone, so every worker sees the same schedule at
any N), and runs its clients with the same `launch` a single process uses. Before the clients
start, the coordinator measures each worker's clock against its own (the exchange with the
shortest round trip: offset = the worker's reading minus the midpoint of the coordinator's
readings around it, known to within half that round trip) and names one start time T0 on its own
clock; each worker runs on the coordinator's timeline through its offset, so every record comes
back in the coordinator's seconds and the merge is a placement by index. Ray places the workers
(worker k on the cluster's live node k modulo their number) and carries the calls; `--workers N` starts a local cluster,
`--ray ADDRESS` joins one already running, the same code path either way. A target at a URL is
reached by each worker itself, through a Toxiproxy of its own (Shard.shared_target).
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import time
from contextlib import contextmanager
from dataclasses import dataclass

from harness.format.scenario import JoinWhile, Scenario

_CONNECTED: str | None = None  # the cluster this process joined: an address, or "local"
START_LEAD_S = 1.0  # T0 is this far ahead of the call that names it: every worker has it before it passes
CLOCK_PROBES = 16  # round trips per worker to measure its clock; the shortest one counts


def sharding_unavailable() -> str | None:
    """Why a sharded run cannot start here (Ray is the `scale` extra), or None."""
    try:
        import ray  # noqa: F401
    except ImportError:
        return "Ray is not installed: pip install 'streamlab[scale]' (scripts/dev setup installs it)"
    return None


def refused(scenario: Scenario, workers: int) -> str | None:
    """What in a scenario cannot be split over workers, or None."""
    for g in scenario.groups:
        if isinstance(g.arrival, JoinWhile) and workers > 1:
            return (f"group {g.name!r} joins while {g.arrival.group!r} runs: its start hangs on another group's "
                    f"first token, which another worker may hold; run it with one worker")
    return None


@dataclass(frozen=True)
class Shard:
    """What one worker is given: the scenario, which clients are its own, and where each connects."""
    scenario: dict  # Scenario.model_dump(mode="json"): the seed is in it
    index: int
    of: int
    ports: dict[str, int]  # group -> the port its clients connect to (a proxy's, or the front's)
    wire: object  # harness.clients.wire's, as the coordinator's server speaks
    offset_s: float  # the worker's monotonic clock minus the coordinator's
    base_s: float  # the coordinator's monotonic reading at its run clock's zero
    start_s: float  # T0 on the coordinator's run clock: no client of any shard starts before it
    deadline_s: float | None
    # A target at a URL (a server of the user's, reachable from every node): the worker's clients
    # aim at it through a Toxiproxy of the worker's own, not at the coordinator's loopback. Its url,
    # ca_file, insecure, and the hosts the user consented to (harness.machine.reach).
    shared_target: dict | None = None


@dataclass
class WorkerReport:
    index: int
    node: str
    clients: int
    offset_s: float
    offset_bound_s: float  # half the round trip of the exchange that measured offset_s
    lag_p99_ms: float = 0.0  # the worker's event loop lag while its clients ran
    margin_ms: float = 0.0  # how long before T0 its clients were ready: negative, they started late
    via: str = "the coordinator's ports"  # where its clients connected

    def summary(self) -> dict:
        return {"worker": self.index, "node": self.node, "clients": self.clients,
                "clock_offset_ms": round(self.offset_s * 1e3, 3),
                "clock_offset_bound_ms": round(self.offset_bound_s * 1e3, 3), "loop_lag_p99_ms": self.lag_p99_ms,
                "ready_before_t0_ms": self.margin_ms, "via": self.via}


def shard_of(planned: list, index: int, of: int) -> list[int]:
    """The plan indexes one worker runs: by client id, k modulo N."""
    return [i for i in range(len(planned)) if i % of == index]


_PLANS: dict[str, tuple[Scenario, list]] = {}  # a worker's plans, by the scenario's JSON: made before T0


def _planned(scenario_json: dict) -> tuple[Scenario, list]:
    import json

    from harness.clients.plan import plan, tokenizer_for

    key = json.dumps(scenario_json, sort_keys=True)
    if key not in _PLANS:
        scenario = Scenario.model_validate(scenario_json)
        _PLANS.clear()  # one scenario at a time
        _PLANS[key] = scenario, plan(scenario, tokenizer_for(scenario.server.model))
    return _PLANS[key]


async def prepare_shard(scenario_json: dict) -> int:
    """Before T0 is named: import what the clients need and plan the scenario (on a busy machine
    this took longer than the lead T0 is given). The number of clients planned."""
    import harness.clients.client  # noqa: F401
    import harness.clients.rawhttp  # noqa: F401

    return len(_planned(scenario_json)[1])


async def run_shard(shard: Shard) -> tuple[list, float, float]:
    """A worker's clients, on the coordinator's timeline (harness.clients.client.launch, as one process
    runs them); their records, the event loop's p99 lag over the run and how long before T0 the
    clients were ready (negative: late), both in ms."""
    from harness.clients.client import launch
    from harness.machine.lag import LoopLag
    from harness.record.trace import StreamRecord

    scenario, planned = _planned(shard.scenario)
    mine = [planned[i] for i in shard_of(planned, shard.index, shard.of)]
    # Every client of this shard waits for T0: the plan's times are counted from it (a join_while
    # client's time counts from its group's first token, and it runs with one worker only).
    mine = [pc if isinstance(pc.group.arrival, JoinWhile) else dataclasses.replace(pc, at_s=pc.at_s + shard.start_s)
            for pc in mine]
    records = [StreamRecord(pc.group.name, pc.index, pc.group.behaviour.kind, pc.prompt, pc.request) for pc in mine]

    def clock() -> float:  # the coordinator's run clock, read through this worker's offset
        return time.monotonic() - shard.offset_s - shard.base_s  # harness.live.loops: not uvloop's ms

    capped = scenario.max_clients_at_once
    if capped:  # the cap is the scenario's over all workers: each takes its share
        scenario = scenario.model_copy(update={"max_clients_at_once": max(1, math.ceil(capped / shard.of))})
    with _own_proxies(shard, scenario) as opener_for:
        margin = shard.start_s - clock()
        async with LoopLag(0.01) as lag:
            # launch counts its deadline from now, past the last arrival, whose time is already on
            # the coordinator's clock: so the deadline is given from this moment.
            await launch(mine, records, scenario, clock, opener_for, None, shard.wire,
                         None if shard.deadline_s is None else shard.deadline_s - clock())
    return records, lag.ms(99), round(margin * 1e3, 1)


@contextmanager
def _own_proxies(shard: Shard, scenario: Scenario):
    """How this worker's clients connect: to the coordinator's ports (its server and Toxiproxy on
    this machine's loopback), or, for a shared target, through a toxiproxy-server of this
    worker's own, one proxy per group with the group's toxics, to the target's address."""
    from harness.clients.client import raw_opener

    if shard.shared_target is None:
        yield lambda pc: raw_opener(shard.ports[pc.group.name], pc.group.behaviour)
        return
    from harness.live.backend import proxied
    from harness.live.toxiproxy import ToxiproxyClient, ToxiproxyServer
    from harness.machine import reach

    shared = shard.shared_target
    reach.consent(shared["allowed"])
    origin = shared_origin(shared)
    server = ToxiproxyServer().start()
    faults = ToxiproxyClient(server)
    try:
        handles = faults.proxy_groups(f"{scenario.name}__worker{shard.index}", proxied(scenario, every_group=True),
                                      origin.authority)
        ports = {name: handle.listen_port for name, handle in handles.items()}

        def opener_for(pc):
            name = pc.group.name
            if name in ports:
                return raw_opener(ports[name], pc.group.behaviour, origin=origin)
            return raw_opener(origin.port, pc.group.behaviour, origin=origin, host=origin.host)  # `direct`
        yield opener_for
    finally:
        faults.close()
        server.stop()


def shared_origin(shared: dict):
    """The shared target's Origin, made where it is used (an SSL context does not cross processes)."""
    from harness.format.target import Target

    return Target(name="shared", url=shared["url"], ca_file=shared["ca_file"], insecure=shared["insecure"],
                  profile="generic", api="openai-completions").origin


class Sharding:
    """A live backend's clients over Ray workers (harness.live.backend.LiveBackend.sharding)."""

    def __init__(self, workers: int, address: str | None = None) -> None:
        missing = sharding_unavailable()
        if missing:
            raise RuntimeError(missing)
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        self.workers, self.address = workers, address
        self.reports: list[WorkerReport] = []
        self._actors: list = []

    def _connect(self):
        import ray

        global _CONNECTED
        wanted = self.address or "local"
        if ray.is_initialized() and _CONNECTED != wanted:  # another session's cluster: leave it
            self._actors = []
            ray.shutdown()
        if not ray.is_initialized():
            if self.address:
                ray.init(address=self.address, log_to_driver=False)
            else:  # a new local cluster (not one found on the machine), living as long as this process
                ray.init(address="local", num_cpus=max(2, self.workers), include_dashboard=False,
                         log_to_driver=False)
            _CONNECTED = wanted
        if len(self._actors) != self.workers:
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            from harness.live.shard_worker import ShardWorker

            # Worker k on live node k modulo their number: one per node where there are enough
            # (SPREAD, Ray's best effort, put both of two on one node of two in a run here).
            nodes = sorted(n["NodeID"] for n in ray.nodes() if n["Alive"])
            self._actors = [ShardWorker.options(num_cpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(
                nodes[k % len(nodes)], soft=False)).remote() for k in range(self.workers)]
        return ray

    def _offset(self, ray, actor) -> tuple[float, float]:
        """(the worker's clock minus ours, half the round trip that measured it)."""
        best = (math.inf, 0.0)
        for _ in range(CLOCK_PROBES):
            before = time.monotonic()
            theirs = ray.get(actor.now.remote())
            after = time.monotonic()
            if after - before < best[0]:
                best = (after - before, theirs - (before + after) / 2)
        return best[1], best[0] / 2

    async def launch(self, planned, records, scenario: Scenario, server, deadline_s: float | None) -> None:
        """Run `planned` over the workers and fill `records` in place (as harness.clients.client.launch does)."""
        problem = refused(scenario, self.workers)
        if problem:
            raise ValueError(f"{scenario.name}: cannot shard: {problem}")
        if getattr(server, "proxy", None) is not None:
            raise ValueError(f"{scenario.name}: cannot shard a run through nginx (its clients are the coordinator's)")
        # In this thread, not a helper one: Ray's local processes die with the thread that started
        # them (PR_SET_PDEATHSIG), and asyncio's helper threads end with the run.
        ray = self._connect()
        data = scenario.model_dump(mode="json")
        counts = await asyncio.to_thread(ray.get, [a.run.remote(prepare_shard, data) for a in self._actors])
        if any(n != len(planned) for n in counts):  # the merge by index needs every plan to be this one
            raise RuntimeError(f"{scenario.name}: workers planned {counts} clients, this process {len(planned)}")
        measured = [await asyncio.to_thread(self._offset, ray, a) for a in self._actors]
        nodes = await asyncio.to_thread(ray.get, [a.node.remote() for a in self._actors])
        ports = {g.name: server.port_for(g.name) for g in scenario.groups}
        shared = self.shared_target(scenario, server.target)
        start = server.clock() + START_LEAD_S
        shards = [Shard(data, k, self.workers, ports, server.wire, offset, server.base, start, deadline_s, shared)
                  for k, (offset, _) in enumerate(measured)]
        refs = [a.run.remote(run_shard, s) for a, s in zip(self._actors, shards)]
        try:
            results = await asyncio.gather(*(asyncio.wrap_future(r.future()) for r in refs))
        except BaseException:  # the other workers' clients would run on, and hold their actors
            for r in refs:
                ray.cancel(r, force=True)
            self.close()
            raise
        self.reports = []
        via = f"its own Toxiproxy to {server.target.origin.authority}" if shared else "the coordinator's ports"
        for k, ((shard_records, lag, margin), (offset, bound)) in enumerate(zip(results, measured)):
            mine = shard_of(planned, k, self.workers)
            assert len(mine) == len(shard_records), (k, len(mine), len(shard_records))
            for i, rec in zip(mine, shard_records):
                records[i] = rec
            self.reports.append(WorkerReport(k, nodes[k], len(shard_records), offset, bound, lag_p99_ms=lag,
                                             margin_ms=margin, via=via))

    @staticmethod
    def shared_target(scenario: Scenario, target) -> dict | None:
        """A URL target is reached by each worker itself (through its own Toxiproxy); a fault that
        the coordinator toggles in time (a proxy down, a toxic's window) cannot reach those proxies."""
        if target is None or target.url is None:
            return None
        toggled = [g.name for g in scenario.groups if g.network and (g.network.down or g.network.windows)]
        if toggled:
            raise ValueError(f"{scenario.name}: cannot shard a run on a shared target with faults toggled in time "
                             f"({', '.join(toggled)}): each worker's Toxiproxy is its own")
        from harness.machine import reach
        return {"url": target.url, "ca_file": target.ca_file, "insecure": target.insecure,
                "allowed": sorted(reach.allowed_hosts())}

    def close(self) -> None:
        if self._actors:
            import ray

            for a in self._actors:
                ray.kill(a)
            self._actors = []
