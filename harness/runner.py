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
from harness import capacity, timing
from harness.baseline import load_baselines
from harness.checks import CheckResult, run_checks
from harness.clients import launch
from harness.trace import StreamRecord
from harness.live_run import LiveBackend
from harness.plan import PlannedClient, loaded_model, plan, sampling_params
from harness.trace import Trace
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
    # Whether live/sim timing outside its tolerance fails parity (off: reported only). It is
    # judged against this machine's profile (harness.machine.use_machine_profile) in the suite, `scenario run`
    # and pytest items alike.
    judge_parity_timing: bool = True
    target: Target | None = None  # --target: live runs aim here instead of each scenario's own
    # The simulated trace a live run's parity and gate are judged against: "sim@machine" (this
    # machine's profile, see harness.machine.use_machine_profile, the default wherever live runs are judged) or
    # "sim" (the committed profile: another machine's seconds, for comparison only).
    parity_mode: str = "sim"
    lab_step_slowdown: float = 1.0  # lab: every scenario's engine made slower by this factor (a real regression)

    def prepared(self, scenario: Scenario) -> Scenario:
        """The scenario as this session runs it (a lab slowdown applied to its server)."""
        if self.lab_step_slowdown == 1:
            return scenario
        server = scenario.server.model_copy(update={"lab": True, "lab_step_slowdown": self.lab_step_slowdown})
        return scenario.model_copy(update={"server": server})

    def live_mode(self, scenario: Scenario) -> str:
        """The mode a scenario's live run has in this session: `live`, or `live@<target>`."""
        target = self.target or scenario.target
        if target is None or target.default:
            return "live"
        mode = f"live@{target.name}"
        self.backends.setdefault(mode, LiveBackend(target))
        return mode


def run_trace(scenario: Scenario, backend: Backend, progress=None) -> tuple[Trace, list[PlannedClient]]:
    """Run a scenario's clients against a backend's server; the trace of what happened. Load or
    SLOs stated relative to this machine are resolved first, by a probe through the same backend
    (harness.capacity)."""
    scenario, probes = capacity.resolve(scenario, lambda probe: run_trace(probe, backend)[0])
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
        return Trace.of(books, scenario=scenario.name, mode=backend.mode, seed=scenario.seed,
                        config=scenario.model_dump(mode="json"), streams=records, duration_s=end,
                        references=references or {})

    t0 = time.perf_counter()
    trace = backend.run(main())
    trace.wall_s = time.perf_counter() - t0
    trace.notes += [p.line() for p in probes]
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
    again: Trace | None = None  # a second live run, when a timing check needed it (harness.timing AGAIN)
    sim: Trace | None = None  # live: the simulation its gate was judged against (this machine's profile)
    paced: list = field(default_factory=lambda: [None, None])  # live: parity's simulation at each run's pace, None: `sim`

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    def failures(self) -> list[str]:
        return [c.line() for c in self.checks if not c.ok]


def trace_for(scenario: Scenario, mode: str, ctx: RunContext) -> Trace:
    """This session's trace of a scenario in a mode, run now if it has none (a baseline, parity)."""
    if (scenario.name, mode) not in ctx.traces:
        ctx.traces[(scenario.name, mode)] = run_trace(ctx.prepared(scenario), ctx.backends[mode])[0]
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
    the scenario's target). progress(done, total) is called as clients finish. A mode the file
    does not list in `modes` is refused here, for every caller."""
    if mode not in scenario.modes:
        raise ValueError(f"{scenario.name} runs in {' and '.join(scenario.modes)} mode only (its `modes`), not {mode}")
    scenario = ctx.prepared(scenario)
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
    live = mode == "live"
    sim = trace_for(scenario, ctx.parity_mode, ctx) if live and "sim" in scenario.modes else None
    baselines = latency_baselines(scenario, mode, ctx, trace, trace_for)
    paced = [at_the_pace(scenario, trace, sim, ctx.backends[ctx.parity_mode]), None]
    timed = timing.judge(scenario, trace, baselines, ctx.baselines, sim, ctx.judge_parity_timing, paced=tuple(paced))
    again = None
    if live and timing.wants_again(timed):
        # AGAIN (harness.timing): the scenario runs once more, then its baseline scenarios just
        # after it, so a latency ratio is formed within one back-to-back pair.
        again = run_trace(scenario, ctx.backends[mode])[0]
        fresh = latency_baselines(scenario, mode, ctx, again, lambda s, m, c: run_trace(c.prepared(s), c.backends[m])[0])
        paced[1] = at_the_pace(scenario, again, sim, ctx.backends[ctx.parity_mode])
        timed = timing.judge(scenario, trace, baselines, ctx.baselines, sim, ctx.judge_parity_timing,
                             again=(again, fresh), paced=tuple(paced))
    checks = run_checks(scenario, trace, solo, timed)
    if ctx.results_dir is not None:
        from harness.report import timeline_png, write_result
        write_result(trace, checks, ctx.results_dir, baseline_figures=timing.baseline_figures(trace, sim))
        timeline_png(trace, ctx.results_dir)
    return Outcome(scenario, trace, checks, again, sim, paced)


def at_the_pace(scenario: Scenario, live: Trace, sim: Trace | None, backend: SimBackend) -> Trace | None:
    """The simulation a live run's parity is judged against at the pace its server ran
    (harness.timing.pace: its busy steps against the profile, over the simulation's on the same
    measure): where that moved past timing.MOVED, the scenario simulated again with the profile's
    step terms scaled by it. A request's own terms stay: the pace does not measure them, and in
    bad_requests the steps ran 1.4x slow while first tokens came sooner than simulated. None where
    the pace did not move, or cannot be read."""
    if sim is None:
        return None
    profile = backend.profile(scenario.server.model)
    k = timing.pace(live, sim, profile)
    if not timing.moved(k):
        return None
    paced = run_trace(scenario, SimBackend(profile.steps_scaled(k)))[0]
    paced.notes.append(f"{timing.PACED}: the live run's steps took {k:.2f}x what the profile says; "
                       f"simulated again with its step terms x{k:.2f}")
    return paced


def simulate(scenario: Scenario, progress=None) -> tuple[Trace, list[PlannedClient]]:
    """One simulated run, unjudged (benchmarks, tests)."""
    return run_trace(scenario, SimBackend(), progress)


def run_live(scenario: Scenario, progress=None) -> tuple[Trace, list[PlannedClient]]:
    """One live run, unjudged (benchmarks, calibration)."""
    return run_trace(scenario, LiveBackend(), progress)
