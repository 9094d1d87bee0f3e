"""Plan a scenario's clients from its seed, run them (simulation here, live in harness/live_run.py),
run the solo references, and apply the checks."""

from __future__ import annotations

import asyncio
import json
import random
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from harness.checks import CheckResult, run_checks
from harness.clients import StreamRecord, launch
from harness.clock import run_virtual
from harness.profile import load_profile
from harness.report import Trace
from harness.scenario import (AtOnce, BandwidthToxic, CorpusPrompt, GroupSpec, JoinWhile, LatencyToxic, Offsets,
                              Poisson, Scenario, Uniform)
from harness.simulation import SimConnection, drive
from streamlab.app import create_app
from streamlab.config import CacheConfig, EngineConfig
from streamlab.detokenizer import TextStream, token_byte_table
from streamlab.engine.engine import BatchEngine
from streamlab.models import LoadedModel, load_model
from streamlab.prompts import shipped_prompts
from streamlab.sampling import SamplingParams

RESULTS = Path("results") / "scenarios"
SETTLE_POLL_S = 0.01


@lru_cache(maxsize=4)
def model(name: str) -> LoadedModel:
    return load_model(name)


@dataclass
class PlannedClient:
    group: GroupSpec
    index: int
    at_s: float  # for join_while: seconds after the named group's first token
    prompt: str
    request: dict
    seed: int


def arrival_times(arrival, count: int, rng: random.Random) -> list[float]:
    if isinstance(arrival, AtOnce):
        return [arrival.at_s] * count
    if isinstance(arrival, (Uniform, JoinWhile)):
        return sorted(rng.uniform(arrival.start_s, arrival.end_s) for _ in range(count))
    if isinstance(arrival, Poisson):
        t, out = arrival.start_s, []
        for _ in range(count):
            t += rng.expovariate(arrival.rate_per_s)
            out.append(t)
        return out
    if isinstance(arrival, Offsets):
        return [arrival.offsets_s[i % len(arrival.offsets_s)] for i in range(count)]
    raise TypeError(arrival)


def corpus_prompt(tokenizer, rng: random.Random, lo: int, hi: int) -> str:
    corpus = shipped_prompts()
    want = rng.randint(lo, hi)
    ids: list[int] = []
    start = rng.randrange(len(corpus))
    for k in range(len(corpus)):
        ids += tokenizer.encode(corpus[(start + k) % len(corpus)] + " ")
        if len(ids) >= want:
            break
    return tokenizer.decode(ids[:want])


def plan(scenario: Scenario, tokenizer) -> list[PlannedClient]:
    rng = random.Random(scenario.seed)
    planned = []
    for group in scenario.groups:
        times = arrival_times(group.arrival, group.count, rng)
        for i in range(group.count):
            prompt = (corpus_prompt(tokenizer, rng, *group.prompt.tokens) if isinstance(group.prompt, CorpusPrompt)
                      else group.prompt.text)
            req = group.request.model_dump()
            if req["seed"] is not None:
                req["seed"] += i
            else:
                req.pop("seed")
            if not scenario.server.lab:  # lab options only go out when the server allows them
                req.pop("pad_bytes")
                req.pop("response_class")
            planned.append(PlannedClient(group, i, times[i], prompt, req, rng.randrange(2**31)))
    return planned


def sampling_params(request: dict) -> SamplingParams:
    return SamplingParams(max_new_tokens=request["max_new_tokens"], temperature=request["temperature"],
                          top_k=request["top_k"], top_p=request["top_p"], seed=request.get("seed"),
                          ignore_eos=request["ignore_eos"])


_SOLO_CACHE: dict[str, list[int]] = {}  # (model, prompt, request) -> tokens, for this process


def solo_runs(scenario: Scenario, loaded: LoadedModel, planned: list[PlannedClient],
              streams: list[StreamRecord]) -> dict[int, list[int]]:
    """Each stream's request run alone on a fresh engine: the identity reference.

    A run goes as far as the longest stream with that request read (plus one token, so a
    stream that made more tokens than its solo run is caught), never past max_new_tokens.
    """
    table = token_byte_table(loaded.tokenizer, loaded.model.shape.vocab_size)
    needed: dict[str, int] = {}
    for i, pc in enumerate(planned):
        if pc.group.behaviour.kind != "bad_request" and streams[i].token_ids:
            key = json.dumps([scenario.server.model, pc.prompt, pc.request], sort_keys=True)
            needed[key] = max(needed.get(key, 0), len(streams[i].token_ids) + 1)
    out: dict[int, list[int]] = {}
    for i, pc in enumerate(planned):
        key = json.dumps([scenario.server.model, pc.prompt, pc.request], sort_keys=True)
        if key not in needed:
            continue
        cached = _SOLO_CACHE.get(key)
        if cached is None or (len(cached) < needed[key] and len(cached) < pc.request["max_new_tokens"]
                              and not _ended_early(cached, pc, loaded)):
            ids = loaded.tokenizer.encode(pc.prompt)
            params = sampling_params(pc.request)
            blocks = CacheConfig().blocks_for(len(ids) + params.max_new_tokens) + 1
            engine = BatchEngine(loaded.model, EngineConfig(max_batch=1, cache=CacheConfig(num_blocks=blocks)))
            engine.submit("solo", ids, params, stop_check=TextStream(table, pc.request["stop"]))
            tokens: list[int] = []
            for _ in range(min(needed[key], params.max_new_tokens)):
                if not engine.has_work():
                    break
                tokens += [t.token_id for t in engine.step().tokens]
            _SOLO_CACHE[key] = cached = tokens
        out[i] = cached
    return out


def _ended_early(tokens: list[int], pc: PlannedClient, loaded: LoadedModel) -> bool:
    """A solo run shorter than asked because it stopped (eos or a stop string) is complete."""
    return bool(tokens) and (tokens[-1] == loaded.model.eos_token_id or bool(pc.request["stop"]))


def sim_network(group: GroupSpec) -> tuple[float, float | None]:
    """(latency s, bandwidth bytes/s) for the simulated link; other toxics are live-only."""
    latency, rate = 0.0, None
    for toxic in (group.network.toxics if group.network else []):
        if isinstance(toxic, LatencyToxic) and toxic.stream == "downstream":
            latency += toxic.latency_ms / 1e3
        elif isinstance(toxic, BandwidthToxic) and toxic.stream == "downstream":
            rate = toxic.rate_kbps * 1024.0
    return latency, rate


async def _simulate(scenario: Scenario, loaded: LoadedModel, planned: list[PlannedClient],
                    progress=None) -> Trace:
    loop = asyncio.get_running_loop()
    clock = loop.time
    profile = load_profile(scenario.server.model)
    app = create_app(scenario.server.service_config(), loaded, clock=clock, threaded=False)
    records = [StreamRecord(pc.group.name, pc.index, pc.group.behaviour.kind, pc.prompt, pc.request) for pc in planned]
    servers: list[asyncio.Task] = []
    async with app.router.lifespan_context(app) as state:
        hub = state["hub"]
        driver = loop.create_task(drive(hub, profile))

        def opener_for(pc: PlannedClient):
            latency, rate = sim_network(pc.group)
            rcvbuf = getattr(pc.group.behaviour, "recv_buffer_bytes", None)

            async def opener(path: str, body, headers):
                conn = SimConnection(profile.buffer_bytes(rcvbuf), latency, rate)
                raw = body if isinstance(body, bytes) else json.dumps(body).encode()
                servers.append(loop.create_task(conn.serve(app, state, "POST", path, raw,
                                                           headers or {"content-type": "application/json"})))
                return conn
            return opener

        await launch(planned, records, scenario, clock, opener_for, progress)
        end = clock()
        deadline = end + scenario.drain_s
        stats = hub.stats()
        while clock() < deadline:
            stats = hub.stats()
            if stats["running"] == stats["waiting"] == stats["streams_registered"] == 0 and \
                    all(t.done() for t in servers):
                break
            await asyncio.sleep(SETTLE_POLL_S)
        releases = [dict(vars(r)) for r in hub.releases]
        invariants = hub.engine.check_invariants()
        ledger = hub.engine.check_released()
        driver.cancel()
        for t in servers:
            t.cancel()
        await asyncio.gather(driver, *servers, return_exceptions=True)
    return Trace(scenario.name, "sim", scenario.seed, scenario.model_dump(mode="json"), records, stats, releases,
                 invariants, ledger, duration_s=end)


def simulate(scenario: Scenario, progress=None) -> tuple[Trace, list[PlannedClient]]:
    loaded = model(scenario.server.model)
    planned = plan(scenario, loaded.tokenizer)
    t0 = time.perf_counter()
    trace = run_virtual(_simulate(scenario, loaded, planned, progress))
    trace.wall_s = time.perf_counter() - t0
    return trace, planned


_BASELINE_TRACES: dict[tuple[str, str], Trace] = {}  # (scenario, mode) -> its latest trace in this process


@dataclass
class Outcome:
    scenario: Scenario
    trace: Trace
    checks: list[CheckResult]

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    def failures(self) -> list[str]:
        return [c.line() for c in self.checks if not c.ok]


def run_scenario(scenario: Scenario, mode: str, baseline_loader=None, write_results: bool = True,
                 progress=None) -> Outcome:
    """progress(done, total) is called as clients finish."""
    if mode == "sim":
        trace, planned = simulate(scenario, progress)
    elif mode == "live":
        from harness.live_run import run_live
        trace, planned = run_live(scenario, progress)
    else:
        raise ValueError(f"unknown mode {mode!r}")
    loaded = model(scenario.server.model)
    solo = solo_runs(scenario, loaded, planned, trace.streams) if scenario.expect.identity else {}
    baselines = {}
    for bound in scenario.expect.latency:
        name = bound.baseline_scenario
        if not name or name in baselines:
            continue
        if name == scenario.name:
            baselines[name] = trace
        elif (name, mode) in _BASELINE_TRACES:  # measured earlier in this process
            baselines[name] = _BASELINE_TRACES[(name, mode)]
        else:
            if baseline_loader is None:
                raise ValueError(f"{scenario.name}: baseline scenario {name!r} needs a loader")
            base = baseline_loader(name)
            if any(b.baseline_scenario not in (None, name) for b in base.expect.latency):
                raise ValueError(f"{scenario.name}: baseline {name!r} has a baseline of its own; chains are refused")
            baselines[name] = run_scenario(base, mode, baseline_loader, write_results=False).trace
    checks = run_checks(scenario, trace, solo, baselines)
    _BASELINE_TRACES[(scenario.name, mode)] = trace
    from harness.baseline import load_baselines, regression
    gate = regression(trace, load_baselines())
    if gate is not None:
        gate.expected_to_fail = False
        checks.append(gate)
    if mode == "live" and "sim" in scenario.modes:
        from harness.checks import parity
        sim_trace = _BASELINE_TRACES.get((scenario.name, "sim")) or simulate(scenario)[0]
        _BASELINE_TRACES[(scenario.name, "sim")] = sim_trace
        checks.append(parity(trace, sim_trace))
    if write_results:
        from harness.report import timeline_png, write_result
        write_result(trace, checks, RESULTS)
        timeline_png(trace, RESULTS)
    return Outcome(scenario, trace, checks)
