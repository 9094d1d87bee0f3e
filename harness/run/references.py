"""What a run is judged against, served to the runner: each request run alone on a fresh engine
(the identity reference), and this session's other traces (a latency bound's baseline scenario,
the simulation a live run's parity and gate compare with, and that simulation at the live run's
pace). The runner asks; this owns the models and engines the solo runs need and the traces the
session has made, so that any subset of items, in any order, gives the same verdicts.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from harness.machine.installed import engine_missing
from harness.machine.pace import PACED, moved, run_pace
from harness.run.once import run_trace
from harness.run.backend import Backend
from harness.clients.plan import PlannedClient, loaded_model
from harness.format.scenario import Scenario
from harness.record.trace import StreamRecord, Trace

if TYPE_CHECKING:  # our engine (torch): imported where a reference is made, never in target mode without it
    from harness.sim.backend import SimBackend
    from streamlab.models import LoadedModel

class Session(Protocol):
    """What the references need of the session asking (harness.run.runner.RunContext)."""
    backends: dict[str, Backend]
    parity_mode: str
    loader: Callable[[str], Scenario]

    def prepared(self, scenario: Scenario) -> Scenario: ...


@dataclass
class Against:
    """Everything one run is judged against, gathered in one call (References.against)."""
    solo: dict  # stream index -> its request's tokens alone (identity); {} where not compared
    sim: Trace | None  # live: the simulation its parity and gate compare with (this session's)
    baselines: dict[str, Trace]  # the scenarios its latency bounds name as baselines
    paced: Trace | None  # live: the simulation again at the pace its server ran, where that moved


@dataclass
class References:
    # (model, prompt, request) -> (tokens alone, whether the run ended there rather than was cut short)
    solo_tokens: dict[str, tuple[list[int], bool]] = field(default_factory=dict)
    traces: dict[tuple[str, str], Trace] = field(default_factory=dict)  # (scenario, mode) -> its latest trace

    # ---- identity: each request alone ----

    def solo(self, scenario: Scenario, planned: list[PlannedClient], streams: list[StreamRecord]) -> dict[int, list[int]]:
        """Each stream's request run alone on a fresh engine: the identity reference.

        A run goes as far as the longest stream with that request read (plus one token, so a
        stream that made more tokens than its solo run is caught), never past max_new_tokens.
        """
        from streamlab.detokenizer import token_byte_table

        loaded = loaded_model(scenario.server.model)
        table = token_byte_table(loaded.tokenizer, loaded.model.shape.vocab_size)
        needed: dict[str, int] = {}
        for i, pc in enumerate(planned):
            if not pc.group.behaviour.refused and streams[i].token_ids:
                key = json.dumps([scenario.server.model, pc.prompt, pc.request], sort_keys=True)
                needed[key] = max(needed.get(key, 0), len(streams[i].token_ids) + 1)
        out: dict[int, list[int]] = {}
        for i, pc in enumerate(planned):
            key = json.dumps([scenario.server.model, pc.prompt, pc.request], sort_keys=True)
            if key not in needed:
                continue
            cached = self.solo_tokens.get(key)
            # A run cut at fewer tokens than this stream needs is run again; one that ended (its
            # length, eos or a stop string) is whole. (Found by the swarm: a stop list alone was
            # once taken to mean it had ended, and a 2-token cut read as the whole solo run.)
            if cached is None or (len(cached[0]) < needed[key] and not cached[1]):
                cached = self.solo_tokens[key] = _alone(loaded, pc, needed[key], table)
            out[i] = cached[0]
        return out

    def identity(self, scenario: Scenario, trace: Trace, planned: list[PlannedClient]) -> dict:
        """What identity compares `trace`'s streams with: a target's own solo runs where it made
        them, ours on a fresh engine, or nothing (identity then reports itself not observable)."""
        if not scenario.expect.identity:
            return {}
        if trace.references:  # a target's own: each request run alone through it
            return trace.references
        if engine_missing():
            return {}
        return self.solo(scenario, planned, trace.streams)

    @staticmethod
    def _run(scenario: Scenario, backend: Backend) -> Trace:
        return run_trace(scenario, backend)[0]

    # ---- everything a run is judged against, in one call ----

    def against(self, scenario: Scenario, mode: str, trace: Trace, planned: list[PlannedClient],
                session: Session) -> Against:
        """What `trace` (a run of `scenario` in `mode`) is judged against: identity's solo runs (a
        target's own where it ran them), this session's simulation for a live run, the latency
        bounds' baseline scenarios (this session's traces) and the simulation at the run's pace."""
        self.traces[(scenario.name, mode)] = trace
        solo = self.identity(scenario, trace, planned)

        def of_session(s: Scenario, m: str) -> Trace:  # `s` as this session runs it
            return self.session_trace(s, m, session.backends[m])
        sim = of_session(scenario, session.parity_mode) if mode == "live" and "sim" in scenario.modes else None
        baselines = self.latency_baselines(scenario, trace, session.loader,
                                           lambda s: of_session(session.prepared(s), mode))
        return Against(solo, sim, baselines, self.at_the_pace(scenario, trace, sim, session.backends.get(session.parity_mode)))

    def again(self, scenario: Scenario, mode: str, trace: Trace, first: Against, session: Session) -> Against:
        """The same for a run made again (harness.judge.timing's AGAIN): its baseline scenarios run
        afresh just after it, so a latency ratio is formed within one back-to-back pair."""
        backend = session.backends[mode]
        baselines = self.latency_baselines(scenario, trace, session.loader,
                                           lambda s: self._run(session.prepared(s), backend))
        return Against(first.solo, first.sim, baselines,
                       self.at_the_pace(scenario, trace, first.sim, session.backends.get(session.parity_mode)))

    # ---- this session's other traces ----

    def session_trace(self, scenario: Scenario, mode: str, backend: Backend) -> Trace:
        """This session's trace of a scenario in a mode, run now if it has none (a baseline, parity)."""
        if (scenario.name, mode) not in self.traces:
            self.traces[(scenario.name, mode)] = self._run(scenario, backend)
        return self.traces[(scenario.name, mode)]

    def latency_baselines(self, scenario: Scenario, trace: Trace, loader,
                          run: Callable[[Scenario], Trace]) -> dict[str, Trace]:
        """The traces of the scenarios its latency bounds name as baselines; `trace` stands for its
        own name, run(scenario) gives each other one's trace (this session's, or a fresh run)."""
        baselines: dict[str, Trace] = {}
        for bound in scenario.expect.latency:
            name = bound.baseline_scenario
            if not name or name in baselines:
                continue
            if name == scenario.name:
                baselines[name] = trace
                continue
            base = loader(name)
            if any(b.baseline_scenario not in (None, name) for b in base.expect.latency):
                raise ValueError(f"{scenario.name}: baseline {name!r} has a baseline of its own; chains are refused")
            baselines[name] = run(base)
        return baselines

    def at_the_pace(self, scenario: Scenario, live: Trace, sim: Trace | None,
                    backend: "SimBackend") -> Trace | None:
        """The simulation a live run's parity is judged against at the pace its server ran
        (harness.judge.timing.run_pace: its busy steps against the profile, over the simulation's on the
        same measure, the whole run's or a group's window's, whichever moved least): where that
        moved past harness.machine.pace.MOVED, the scenario simulated again with the profile's step terms scaled
        by it. A request's own terms stay: the pace does not measure them, and in bad_requests the
        steps ran 1.4x slow while first tokens came sooner than simulated. None where the pace did
        not move, or cannot be read."""
        if sim is None:
            return None
        profile = backend.profile(scenario.server.model)
        groups = list(dict.fromkeys(g.name for g in scenario.groups))
        k = run_pace(live, sim, profile, groups)
        if not moved(k):
            return None
        from harness.sim.backend import SimBackend

        paced = self._run(scenario, SimBackend(profile.steps_scaled(k)))
        paced.notes.append(f"{PACED}: the live run's steps took {k:.2f}x what the profile says; "
                           f"simulated again with its step terms x{k:.2f}")
        return paced


def _alone(loaded: "LoadedModel", pc: PlannedClient, needed: int, table) -> tuple[list[int], bool]:
    """The request run alone for up to `needed` tokens, and whether its sequence ended by itself."""
    from streamlab.config import CacheConfig, EngineConfig
    from streamlab.detokenizer import TextStream
    from streamlab.engine.engine import BatchEngine
    from streamlab.sampling import SamplingParams

    ids = loaded.tokenizer.encode(pc.prompt)
    params = SamplingParams.of(pc.request)
    want = min(needed, params.max_new_tokens)
    blocks = CacheConfig().blocks_for(len(ids) + params.max_new_tokens) + 1
    engine = BatchEngine(loaded.model, EngineConfig(max_batch=1, cache=CacheConfig(num_blocks=blocks)))
    engine.submit("solo", ids, params, stop_check=TextStream(table, pc.request["stop"]))
    tokens: list[int] = []
    ended = False
    # A long prompt may take several steps before its first token (chunked prefill).
    for _ in range(want + len(ids) + 1):
        if len(tokens) >= want or not engine.has_work():
            break
        out = engine.step()
        tokens += [t.token_id for t in out.tokens]
        ended = ended or bool(out.finished)
    return tokens, ended
