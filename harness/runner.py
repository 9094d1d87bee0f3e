"""The one runner: plan a scenario's clients from its seed, run them against a backend (the
simulation or the live server), run the solo references, and apply the checks.

State that decides a verdict (solo references, the traces a baseline or a parity check
compares with) lives in a RunContext that the caller owns and passes in: the pytest
session's for items, the CLI's own for `streamlab scenario run|suite`. Nothing is kept in
module globals, so any subset of items, in any order, gives the same verdicts.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path

from harness.backend import Backend
from harness.baseline import load_baselines, regression
from harness.checks import CheckResult, latency, parity, run_checks, timing_only
from harness.clients import StreamRecord, launch
from harness.live_run import LiveBackend
from harness.plan import PlannedClient, loaded_model, plan, sampling_params
from harness.profile import StepCostProfile
from harness.report import Trace
from harness.scenario import Scenario, load_by_name
from harness.targets import Target
from harness.simulation import SimBackend
from streamlab.config import CacheConfig, EngineConfig
from streamlab.detokenizer import TextStream, token_byte_table
from streamlab.engine.engine import BatchEngine
from streamlab.models import LoadedModel

RESULTS = Path("results") / "scenarios"


@dataclass
class RunContext:
    """What one session of scenario runs shares. Owned by the caller, passed in."""
    results_dir: Path | None = RESULTS  # None: write no result files
    loader: object = load_by_name  # a baseline scenario's name -> Scenario
    backends: dict[str, Backend] = field(default_factory=lambda: {"sim": SimBackend(), "live": LiveBackend()})
    baselines: dict = field(default_factory=load_baselines)  # the committed latency figures
    solo: dict[str, list[int]] = field(default_factory=dict)  # (model, prompt, request) -> tokens run alone
    traces: dict[tuple[str, str], Trace] = field(default_factory=dict)  # (scenario, mode) -> its latest trace
    # Whether live/sim timing outside its tolerance fails parity. `scripts/dev main` judges it,
    # against a profile fitted in the same session; pytest items (CI) report it only: an item has
    # no session profile, and a CI machine's speed is not the committed profile's.
    judge_parity_timing: bool = True
    target: Target | None = None  # --target: live runs aim here instead of each scenario's own
    # The simulated trace a live run's parity is judged against: "sim" (the committed profile, the
    # same run the simulated checks and gate judge) or "sim@session" (a profile fitted on this
    # machine at the start of the session, see use_session_profile).
    parity_mode: str = "sim"

    def live_mode(self, scenario: Scenario) -> str:
        """The mode a scenario's live run has in this session: `live`, or `live@<target>`."""
        target = self.target or scenario.target
        if target is None or target.default:
            return "live"
        mode = f"live@{target.name}"
        self.backends.setdefault(mode, LiveBackend(target))
        return mode


def run_trace(scenario: Scenario, backend: Backend, progress=None) -> tuple[Trace, list[PlannedClient]]:
    """Run a scenario's clients against a backend's server; the trace of what happened."""
    loaded = loaded_model(scenario.server.model)
    planned = plan(scenario, loaded.tokenizer)
    records = [StreamRecord(pc.group.name, pc.index, pc.group.behaviour.kind, pc.prompt, pc.request) for pc in planned]

    async def main() -> Trace:
        async with backend.serving(scenario) as server:
            await launch(planned, records, scenario, server.clock, server.opener_for, progress, server.wire)
            end = server.clock()
            await server.settle(scenario.drain_s)
            books = await server.collect()
            references = await server.references(planned, records)
        return Trace(scenario.name, backend.mode, scenario.seed, scenario.model_dump(mode="json"), records,
                     books.stats, books.releases, books.invariants, books.ledger_problems, duration_s=end,
                     notes=books.notes, failure=books.failure, steps=books.steps, step_timing=books.step_timing,
                     target=books.target, references=references or {})

    t0 = time.perf_counter()
    trace = backend.run(main())
    trace.wall_s = time.perf_counter() - t0
    return trace, planned


def solo_runs(scenario: Scenario, loaded: LoadedModel, planned: list[PlannedClient],
              streams: list[StreamRecord], cache: dict[str, list[int]]) -> dict[int, list[int]]:
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
        cached = cache.get(key)
        if cached is None or (len(cached) < needed[key] and len(cached) < pc.request["max_new_tokens"]
                              and not _ended_early(cached, pc, loaded)):
            ids = loaded.tokenizer.encode(pc.prompt)
            params = sampling_params(pc.request)
            blocks = CacheConfig().blocks_for(len(ids) + params.max_new_tokens) + 1
            engine = BatchEngine(loaded.model, EngineConfig(max_batch=1, cache=CacheConfig(num_blocks=blocks)))
            engine.submit("solo", ids, params, stop_check=TextStream(table, pc.request["stop"]))
            tokens: list[int] = []
            want = min(needed[key], params.max_new_tokens)
            # A long prompt may take several steps before its first token (chunked prefill).
            for _ in range(want + len(ids) + 1):
                if len(tokens) >= want or not engine.has_work():
                    break
                tokens += [t.token_id for t in engine.step().tokens]
            cache[key] = cached = tokens
        out[i] = cached
    return out


def _ended_early(tokens: list[int], pc: PlannedClient, loaded: LoadedModel) -> bool:
    """A solo run shorter than asked because it stopped (eos or a stop string) is complete."""
    return bool(tokens) and (tokens[-1] == loaded.model.eos_token_id or bool(pc.request["stop"]))


@dataclass
class Outcome:
    scenario: Scenario
    trace: Trace
    checks: list[CheckResult]
    again: Trace | None = None  # a second live run, when a latency, regression or parity check needed it

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    def failures(self) -> list[str]:
        return [c.line() for c in self.checks if not c.ok]


def trace_for(scenario: Scenario, mode: str, ctx: RunContext) -> Trace:
    """This session's trace of a scenario in a mode, run now if it has none (a baseline, parity)."""
    if (scenario.name, mode) not in ctx.traces:
        ctx.traces[(scenario.name, mode)] = run_trace(scenario, ctx.backends[mode])[0]
    return ctx.traces[(scenario.name, mode)]


def latency_baselines(scenario: Scenario, mode: str, ctx: RunContext, trace: Trace, run) -> dict[str, Trace]:
    """The traces of the scenarios its latency bounds name as baselines; `trace` stands for its
    own name, and run(scenario, mode, ctx) gives each other one's trace."""
    baselines: dict[str, Trace] = {}
    for bound in scenario.expect.latency:
        name = bound.baseline_scenario
        if not name or name in baselines:
            continue
        if name == scenario.name:
            baselines[name] = trace
            continue
        base = ctx.loader(name)
        if any(b.baseline_scenario not in (None, name) for b in base.expect.latency):
            raise ValueError(f"{scenario.name}: baseline {name!r} has a baseline of its own; chains are refused")
        baselines[name] = run(base, mode, ctx)
    return baselines


def run_scenario(scenario: Scenario, mode: str, ctx: RunContext, progress=None) -> Outcome:
    """Run and judge one scenario in one mode ("sim" or "live"; "live" aims at the session's or
    the scenario's target). progress(done, total) is called as clients finish."""
    if mode == "live":
        mode = ctx.live_mode(scenario)
    if mode not in ctx.backends:
        raise ValueError(f"unknown mode {mode!r}")
    trace, planned = run_trace(scenario, ctx.backends[mode], progress)
    ctx.traces[(scenario.name, mode)] = trace
    loaded = loaded_model(scenario.server.model)
    if not scenario.expect.identity:
        solo = {}
    elif trace.references:
        solo = trace.references
    else:
        solo = solo_runs(scenario, loaded, planned, trace.streams, ctx.solo)
    baselines = latency_baselines(scenario, mode, ctx, trace, trace_for)
    checks = run_checks(scenario, trace, solo, baselines)
    seconds: list[Trace] = []

    def again() -> Trace:
        """A second live run of this scenario, made once and shared by every check that asks."""
        if not seconds:
            seconds.append(run_trace(scenario, ctx.backends[mode])[0])
        return seconds[0]

    first = next((c for c in checks if c.name == "latency"), None)
    if mode == "live" and first is not None and first.passed is False:
        # The same verdict rule for a negative control: it must fail on both runs. Its baselines
        # are run again too, just after it: a ratio of two runs made back to back.
        fresh = latency_baselines(scenario, mode, ctx, again(), lambda s, m, c: run_trace(s, c.backends[m])[0])
        second = latency(scenario, trace, baselines, (again(), fresh))
        second.expected_to_fail = first.expected_to_fail
        checks[checks.index(first)] = second
    gate = regression(trace, ctx.baselines)
    if gate is not None and not gate.passed and mode == "live":
        gate = regression(trace, ctx.baselines, again=again())
    if gate is not None:
        checks.append(gate)
    if mode == "live" and "sim" in scenario.modes:
        sim = trace_for(scenario, ctx.parity_mode, ctx)
        check = parity(scenario, trace, sim, ctx.judge_parity_timing)
        if ctx.judge_parity_timing and timing_only(check):
            # One live run's p50 moves by up to ~1.5x between runs on this shared machine (a batch-8
            # step took 1.25 ms in one run and 1.9 ms in the next): judge on two runs, not one.
            check = parity(scenario, trace, sim, ctx.judge_parity_timing, again())
        checks.append(check)
    if ctx.results_dir is not None:
        from harness.report import timeline_png, write_result
        write_result(trace, checks, ctx.results_dir)
        timeline_png(trace, ctx.results_dir)
    return Outcome(scenario, trace, checks, seconds[0] if seconds else None)


def use_session_profile(ctx: RunContext, models: list[str], say=print) -> list[StepCostProfile]:
    """Fit the cost model on this machine now (`calibrate`, ~1.5 min, nothing written) and judge
    parity against a simulation that uses it. The committed profile still drives the "sim"
    runs, so the simulated checks and their tight gate stay deterministic; but a machine's
    speed drifts (the same engine step measured 1.1-1.45x apart on one machine within two
    hours), and parity should judge the model, not the afternoon."""
    from harness.calibrate import calibrate

    profiles = [calibrate(m, say=say, repeats=SESSION_ROUNDS, measure_transport=False) for m in models]
    ctx.backends["sim@session"] = SimBackend(*profiles)
    ctx.parity_mode = "sim@session"
    return profiles


SESSION_ROUNDS = 5  # rounds of live calibration runs for a session profile: at 3 the small-batch serving terms still moved 0.2-0.7 ms between rounds


def simulate(scenario: Scenario, progress=None) -> tuple[Trace, list[PlannedClient]]:
    """One simulated run, unjudged (benchmarks, tests)."""
    return run_trace(scenario, SimBackend(), progress)


def run_live(scenario: Scenario, progress=None) -> tuple[Trace, list[PlannedClient]]:
    """One live run, unjudged (benchmarks, calibration)."""
    return run_trace(scenario, LiveBackend(), progress)
