"""The one runner: a scenario run once (harness/run/once.py) through the simulation or a live
server, then judged: against what the References a RunContext holds gather in one call
(harness/run/references.py: each request alone, this session's simulation, the baselines its
latency bounds name, the simulation at the run's pace), by the checks, and written.

The caller owns the context and passes it in: the pytest session's for items, the CLI's own for
`streamlab scenario run|suite`. Nothing is kept in module globals, so any subset of items, in
any order, gives the same verdicts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from harness.run.backend import Backend
from harness.judge import timing
from harness.judge.baselines import baseline_figures
from harness.judge.bounds import DRIFT, RUNS
from harness.machine.drift import EngineReadings
from harness.judge.baselines import load_baselines
from harness.judge.checks import CheckResult, run_checks
from harness.live.backend import LiveBackend, live_unavailable
from harness.run.references import References
from harness.machine.installed import engine_missing
from harness.run.once import run_trace
from harness.record.trace import Trace
from harness.format.scenario import Scenario
from harness.format.load import load_by_name
from harness.format.target import Target
from harness.judge.report import timeline_png, write_result
from harness.targets.findings import FRESH_SERVER
from harness.targets.scope import for_target, scenario_refused
from streamlab.presets import PRESETS

RESULTS = Path("results") / "scenarios"


def default_backends() -> dict[str, Backend]:
    """Live, and the simulation where our engine is installed (target mode runs without it)."""
    backends: dict[str, Backend] = {"live": LiveBackend()}
    if engine_missing() is None:
        from harness.sim.backend import SimBackend

        backends["sim"] = SimBackend()
    return backends


def lab_options(step_slowdown: float = 1.0, defect: str = "") -> dict:
    """The server options that give a scenario's server a lab slowdown or a seeded defect ({}: none)."""
    lab = {"lab_step_slowdown": step_slowdown} if step_slowdown != 1 else {}
    lab |= {"lab_defect": defect} if defect else {}
    return {"lab": True, **lab} if lab else {}


@dataclass
class RunContext:
    """What one session of scenario runs shares. Owned by the caller, passed in."""
    results_dir: Path | None = RESULTS  # None: write no result files
    loader: Callable[[str], Scenario] = load_by_name  # a baseline scenario's name -> Scenario
    backends: dict[str, Backend] = field(default_factory=default_backends)
    baselines: dict = field(default_factory=load_baselines)  # the committed latency figures
    # What runs are judged against: each request alone, and this session's other traces.
    references: References = field(default_factory=References)
    # Whether live/sim timing outside its tolerance fails parity (off: reported only). It is
    # judged against this machine's profile (harness.fit.machine.use_machine_profile) in the suite, `scenario run`
    # and pytest items alike.
    judge_parity_timing: bool = True
    # The drift check's engine readings, reused between runs of the same engine (harness.judge.timing).
    engine_readings: EngineReadings = field(default_factory=lambda: EngineReadings(DRIFT))
    target: Target | None = None  # --target: live runs aim here instead of each scenario's own
    # The simulated trace a live run's parity and gate are judged against: "sim@machine" (this
    # machine's profile, see harness.fit.machine.use_machine_profile, the default wherever live runs are judged) or
    # "sim" (the committed profile: another machine's seconds, for comparison only).
    parity_mode: str = "sim"
    lab_step_slowdown: float = 1.0  # lab: every scenario's engine made slower by this factor (a real regression)
    lab_defect: str = ""  # lab: every scenario's server runs this seeded defect (streamlab/defects.py)
    # --workers / --ray: every live run's clients over Ray workers (harness.live.shards); None: in this process
    sharding: object | None = None

    def __post_init__(self) -> None:
        self._share_sharding()

    def _share_sharding(self) -> None:
        for backend in self.backends.values():
            if isinstance(backend, LiveBackend):
                backend.sharding = self.sharding

    def close(self) -> None:
        """Stop what the session's backends keep between runs (a command target's server), and its workers."""
        for backend in self.backends.values():
            close = getattr(backend, "close", None)
            if close is not None:
                close()
        if self.sharding is not None:
            self.sharding.close()

    def prepared(self, scenario: Scenario) -> Scenario:
        """The scenario as this session runs it (a lab slowdown or a seeded defect applied to its server)."""
        lab = lab_options(self.lab_step_slowdown, self.lab_defect)
        if not lab:
            return scenario
        return scenario.model_copy(update={"server": scenario.server.model_copy(update=lab)})

    def target_for(self, scenario: Scenario) -> Target | None:
        """Where the scenario's live run aims in this session: another server, or None for the
        scenario's own (our engine)."""
        target = self.target or scenario.target
        return None if target is None or target.default else target

    def run_order(self, scenarios: list[Scenario]) -> list[Scenario]:
        """The scenarios in the order to run them live: those a command target serves alike
        (harness.live.backend.LiveBackend.kept_key) side by side, so its server starts once per kind
        (vLLM takes 40 s; in name order the library switched batch size 13 times). Within a kind,
        a scenario that must start on a fresh server (harness.targets.findings.FRESH_SERVER) comes first,
        where the server is fresh anyway, and then the latency baselines others name, so their
        own run is the one the others read (after them, each ran twice: once on demand)."""
        named = {b.baseline_scenario for s in scenarios for b in s.expect.latency} - {None}

        def key(scenario: Scenario):
            target = self.target_for(scenario)
            backend = self.backends.get(self.live_mode(scenario))
            kept = backend.kept_key(scenario) if isinstance(backend, LiveBackend) else None
            fresh = target is not None and (target.name, scenario.name) in FRESH_SERVER
            return (() if kept is None else (str(kept[0]), kept[1])), not fresh, scenario.name not in named
        return sorted(scenarios, key=key)  # stable: name order within a kind

    def live_mode(self, scenario: Scenario) -> str:
        """The mode a scenario's live run has in this session: `live`, or `live@<target>`."""
        target = self.target_for(scenario)
        if target is None:
            return "live"
        mode = f"live@{target.name}"
        self.backends.setdefault(mode, LiveBackend(target))
        self._share_sharding()
        return mode




@dataclass
class Outcome:
    scenario: Scenario
    trace: Trace
    checks: list[CheckResult]
    runs: list = field(default_factory=list)  # harness.judge.timing.Run: `trace`'s, then any more a timing check needed (AGAIN)
    sim: Trace | None = None  # live: the simulation its gate was judged against (this machine's profile)
    left_out: list[str] = field(default_factory=list)  # on another server: the groups it cannot run, and why

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    def failures(self) -> list[str]:
        return [c.line() for c in self.checks if not c.ok]


def mode_refused(scenario: Scenario, mode: str) -> str | None:
    """Why a scenario does not run in this mode (its `modes`), or None."""
    if mode in scenario.modes:
        return None
    return f"{scenario.name} runs in {' and '.join(scenario.modes)} mode only (its `modes`), not {mode}"


def engine_refused(scenario: Scenario, mode: str, ctx: RunContext) -> str | None:
    """Why this process cannot run `scenario` in `mode`, or None: a simulation, and a live run of
    our own server, need our engine installed; a run against a target (the session's or the
    file's own) does not, unless its prompts are cut by a model that is not a preset."""
    if engine_missing() is None:
        return None
    if mode == "sim" or (mode == "live" and ctx.target_for(scenario) is None):
        return engine_missing()
    if scenario.server.model not in PRESETS:
        return f"the prompts are cut with {scenario.server.model!r}'s tokenizer: {engine_missing()}"
    return None


def foreign_target(scenario: Scenario, mode: str, ctx: RunContext) -> Target | None:
    """Another server than ours that this live run aims at, or None (a simulation, our own
    server on any route)."""
    target = ctx.target_for(scenario) if mode.startswith("live") else None
    return target if target is not None and not target.own_server else None


def target_refused(scenario: Scenario, mode: str, ctx: RunContext) -> str | None:
    """Why no part of the scenario runs on the session's target, or None (harness.targets.scope)."""
    target = foreign_target(scenario, mode, ctx)
    if target is None:
        return None
    return scenario_refused(scenario, target)


def refused_here(scenario: Scenario, mode: str, ctx: RunContext) -> str | None:
    """Why `scenario` cannot run in `mode` in this session on this machine, or None: the one answer
    for `scenario run`, the suite, a pytest item and the targets report. Its file's `modes`, then
    (live) what this machine lacks for it (Toxiproxy, nginx, a browser, a peer's binary), then
    what this process lacks (our engine), then what its target cannot run."""
    reason = mode_refused(scenario, mode)
    if reason is None and mode == "live":
        reason = live_unavailable(scenario, ctx.target_for(scenario))
    return reason or engine_refused(scenario, mode, ctx) or target_refused(scenario, mode, ctx)


def fitted_model(scenario: Scenario, ctx: RunContext) -> str | None:
    """The model whose machine fit (harness.fit.machine) a live run of `scenario` is judged
    against in this session, or None: only a run of our own server that also runs simulated
    (parity and the live gate compare the two); a target's runs are not judged against our
    simulation."""
    if ctx.target_for(scenario) is not None or not {"sim", "live"} <= set(scenario.modes):
        return None
    return None if refused_here(scenario, "live", ctx) else scenario.server.model


def run_scenario(scenario: Scenario, mode: str, ctx: RunContext, progress=None) -> Outcome:
    """Run and judge one scenario in one mode ("sim" or "live"; "live" aims at the session's or
    the scenario's target). progress(done, total) is called as clients finish. A mode the file
    does not list in `modes` is refused here, for every caller."""
    refused = mode_refused(scenario, mode)
    if refused:
        raise ValueError(refused)
    scenario = ctx.prepared(scenario)
    if mode == "live":
        mode = ctx.live_mode(scenario)
    refused = engine_refused(scenario, mode, ctx) or target_refused(scenario, mode, ctx)
    if refused:
        raise ValueError(f"{scenario.name} [{mode}]: {refused}")
    left_out: list[str] = []
    target = foreign_target(scenario, mode, ctx)
    if target is not None:  # only the groups another server can run
        scenario, left_out = for_target(scenario, target)
    if mode not in ctx.backends:
        raise ValueError(f"unknown mode {mode!r}")
    trace, planned = run_trace(scenario, ctx.backends[mode], progress, readings=ctx.engine_readings)
    trace.notes += left_out
    against = ctx.references.against(scenario, mode, trace, planned, ctx)
    runs = [timing.Run(trace, against.baselines, against.paced)]
    timed = timing.judge(scenario, runs, ctx.baselines, against.sim, ctx.judge_parity_timing)
    while mode.startswith("live") and len(runs) < RUNS and timing.wants_again(timed, scenario.expect.expect_failure):
        # AGAIN (harness.judge.timing): the scenario runs once more, and is judged on the best run;
        # a target's runs too (live@NAME), whose latency ratios are as noisy as ours.
        again = run_trace(scenario, ctx.backends[mode], readings=ctx.engine_readings)[0]
        more = ctx.references.again(scenario, mode, again, against, ctx)
        runs.append(timing.Run(again, more.baselines, more.paced))
        timed = timing.judge(scenario, runs, ctx.baselines, against.sim, ctx.judge_parity_timing)
    checks = run_checks(scenario, trace, against.solo, timed)
    if ctx.results_dir is not None:
        write_result(trace, checks, ctx.results_dir, baseline_figures=baseline_figures(trace, against.sim))
        timeline_png(trace, ctx.results_dir)
    return Outcome(scenario, trace, checks, runs, against.sim, left_out)
