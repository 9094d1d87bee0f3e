"""The swarm (issue 24): scenarios drawn from a seed and run in simulation, each judged by the
always-on checks and what the policies promise (harness/swarm/properties.py); the first failure
shrunk by Hypothesis to a minimal scenario and written as YAML.

Hypothesis draws (harness/swarm/draw.py) and shrinks, and its example database (under
.tools/swarm-db by default) keeps a failing draw: the next swarm with the same database replays
it first. What is judged is the simulation's verdict, which is deterministic (virtual time, the
committed cost model), so a draw gives the same verdict each time Hypothesis asks.

Budgets bound both halves: the search stops after `runs` draws or `time_s` seconds; the
shrink after SHRINK_RUNS more runs or SHRINK_S seconds, keeping the smallest failure seen.
"""

from __future__ import annotations

import json
import random
import time
import traceback
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from harness.judge.checks import run_checks
from harness.format.scenario import SCENARIOS_DIR, Scenario
from harness.swarm.properties import swarm_properties
from harness.record.trace import SERVER_STATES, states_reached
from harness.record.verdict import CheckResult
from harness.run.once import run_trace
from harness.run.references import References

FOUND_DIR = SCENARIOS_DIR / "found"
DATABASE_DIR = Path(".tools") / "swarm-db"
SHRINK_RUNS = 400
# Virtual seconds a drawn scenario's clients may run: the longest a draw can need is about 10
# (a sleeper's 2 s sleeps over 40 tokens of small reads, a stalled client's 4 s patience), so a
# client still waiting at 60 waits on a stream the server never ends.
RUN_DEADLINE_S = 60.0
SHRINK_S = 300.0

# Registry checks of a scenario's own premise, which a drawn scenario's timing can miss with no
# defect anywhere: engine_faults asserts that its fault fired (a drawn fault step may come after
# the run's last step), arrivals that its joiners met a running batch (the group they join may
# have ended first). Timing checks are not run here at all: they need a machine's baselines.
NOT_JUDGED = ("engine_faults", "arrivals")
# Checks whose failure can also be a premise that did not hold (nobody left early; a
# reconnector's stream ended, by a fault or its deadline, before it left): a result whose every
# detail is that premise is not a finding. Its other details are (a lost or repeated event).
PREMISES = {"release_within": "no stream left early", "resumption": "never resumed"}


def _premise_only(result: CheckResult) -> bool:
    premise = PREMISES.get(result.name)
    return premise is not None and bool(result.details) and all(premise in d for d in result.details)


def finding(result: CheckResult) -> bool:
    """A failed check that is a finding for the swarm, on our server or a target: judged here, and
    not only a drawn scenario's premise that did not hold."""
    return not result.ok and result.name not in NOT_JUDGED and not _premise_only(result)


class _OutOfBudget(BaseException):
    """The search's budget is spent. A BaseException, so Hypothesis does not take it for a
    failure to shrink (it catches Exception) and it ends the search."""


@contextmanager
def _draws_from_the_seed_alone():
    """Hypothesis (6.13x on) sometimes draws a literal found in the source of the local modules
    loaded so far instead of a random value (providers._get_local_constants). So a seed's draws
    depended on what the process had imported: a CI worker that had imported the test modules
    before the swarm's drew other scenarios than the same seed anywhere else, and missed seeded
    defects this machine found at their counts (last_free_block, shared_seed_rng: none in 60 runs
    after importing the tests, 26 and 30 without). The swarm's draws use Hypothesis's own
    constants only. Hypothesis's internals: where they differ, the draws keep their old behaviour."""
    try:
        from hypothesis.internal.conjecture import providers
        empty = providers.Constants()
        cache = providers.CONSTANTS_CACHE
        original = providers._get_local_constants
    except (ImportError, AttributeError):
        yield
        return
    cache.cache.clear()  # it keeps the local constants it chose for each kind of draw
    providers._get_local_constants = lambda: empty
    try:
        yield
    finally:
        providers._get_local_constants = original
        cache.cache.clear()


def size(scenario: Scenario) -> tuple[int, int, int]:
    """(groups, clients, tokens asked for): what shrinking makes smaller."""
    return (len(scenario.groups), sum(g.count for g in scenario.groups),
            sum(g.count * g.request.max_new_tokens for g in scenario.groups))


class Judge:
    """Runs a scenario in simulation (or live: `live=True`, our own server on loopback, as a
    found file's replay is checked) and returns the checks it failed. One per swarm: the solo
    runs identity compares with are cached across draws."""

    def __init__(self, live: bool = False) -> None:
        if live:
            from harness.live.backend import LiveBackend
            self.backend = LiveBackend()
            self.backend.run_deadline_s = RUN_DEADLINE_S / 2  # real seconds: a hung stream's reader stops sooner
        else:
            from harness.sim.backend import SimBackend
            self.backend = SimBackend(run_deadline_s=RUN_DEADLINE_S)
        self._run_trace = run_trace
        self.references = References()
        self.last_states: set[str] = set()  # the server states the last run reached

    def failures(self, scenario: Scenario) -> list[CheckResult]:
        try:
            trace, planned = self._run_trace(scenario, self.backend)
            self.last_states = states_reached(trace)
            solo = self.references.solo(scenario, planned, trace.streams) if scenario.expect.identity else {}
            results = [r for r in run_checks(scenario, trace, solo) if finding(r)]
            results += swarm_properties(scenario, trace)
        except Exception as exc:  # the harness or the server broke on a valid scenario: a finding too
            last = traceback.format_exception(exc)[-1].strip()
            return [CheckResult("runs", False, last, "a valid scenario runs to the end",
                                traceback.format_exception(exc)[-6:])]
        return [r for r in results if not r.ok]


@dataclass
class Found:
    scenario: Scenario  # shrunk
    failed: list[CheckResult]
    first: Scenario  # as first drawn
    runs_to_find: int
    seconds_to_find: float
    shrink_runs: int
    shrink_s: float
    path: Path | None = None


@dataclass
class SwarmResult:
    seed: int
    runs: int
    seconds: float
    found: Found | None
    passed: int = 0
    features_seen: dict[str, int] = field(default_factory=dict)
    states_reached: dict[str, int] = field(default_factory=dict)  # server state -> runs that reached it

    @property
    def per_minute(self) -> float:
        return 60 * self.runs / self.seconds if self.seconds else 0.0


def search(seed: int, runs: int | None = None, time_s: float | None = None, defect: str = "",
           database: Path | None = DATABASE_DIR, judge: Judge | None = None, say=lambda line: None,
           shrink_runs: int = SHRINK_RUNS, shrink_s: float = SHRINK_S) -> SwarmResult:
    """Draw scenarios from `seed` until one fails, `runs` have run or `time_s` passed; shrink the
    failure. `defect`: every draw's server runs this seeded defect (lab)."""
    from hypothesis import HealthCheck, Phase, find, settings
    from hypothesis.database import DirectoryBasedExampleDatabase
    from hypothesis.errors import NoSuchExample

    from harness.swarm.draw import scenarios

    if runs is None and time_s is None:
        raise ValueError("give runs, time_s or both")
    judge = judge or Judge()
    shrink_runs = min(shrink_runs, getattr(judge, "shrink_runs", shrink_runs))
    verdicts: dict[str, list[CheckResult]] = {}
    state = {"runs": 0, "passed": 0, "first": None, "found_at": 0.0, "found_runs": 0, "best": None,
             "features": {}, "states": dict.fromkeys(SERVER_STATES, 0)}
    t0 = time.perf_counter()

    def searching() -> bool:
        return (runs is None or state["runs"] < runs) and (time_s is None or time.perf_counter() - t0 < time_s)

    def shrinking() -> bool:
        return state["runs"] - state["found_runs"] < shrink_runs and \
            time.perf_counter() - t0 - state["found_at"] < shrink_s

    def fails(scenario: Scenario) -> bool:
        key = json.dumps(scenario.model_dump(mode="json"), sort_keys=True)
        if key in verdicts:
            return bool(verdicts[key])
        if state["first"] is None and not searching():
            raise _OutOfBudget  # Hypothesis has no time limit of its own: stop it
        if state["first"] is not None and not shrinking():
            return False  # out of shrinking budget: unseen draws count as passing, so the shrink ends
        failed = verdicts[key] = judge.failures(scenario)
        state["runs"] += 1
        for word in scenario.description.split("features: ", 1)[-1].split(", "):
            state["features"][word] = state["features"].get(word, 0) + 1
        for reached in getattr(judge, "last_states", ()):
            state["states"][reached] += 1
        if not failed:
            state["passed"] += 1
            return False
        if state["first"] is None:
            state.update(first=scenario, found_at=time.perf_counter() - t0, found_runs=state["runs"])
            say(f"run {state['runs']}: {', '.join(r.name for r in failed)} failed; shrinking")
        if state["best"] is None or size(scenario) < size(state["best"][0]):
            state["best"] = (scenario, failed)
        return True

    db = DirectoryBasedExampleDatabase(str(database)) if database is not None else None
    # Hypothesis counts a repeated draw as an example too; the budget counts distinct runs, and
    # _OutOfBudget ends the search.
    # derandomize=False: with CI set in the environment Hypothesis loads its "ci" profile, which
    # derandomizes, and the draws no longer came from `seed`: a search in CI drew other scenarios
    # than the same seed here (seeded defects not found in CI at the counts measured here).
    config = settings(max_examples=10**6, deadline=None, database=db, suppress_health_check=list(HealthCheck),
                      phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink], derandomize=False)
    key = f"streamlab-swarm:{defect}:{getattr(judge, 'for_target', False)}".encode()
    drawn = scenarios(defect=defect, for_target=getattr(judge, "for_target", False))
    try:
        with _draws_from_the_seed_alone():
            find(drawn, fails, settings=config, random=random.Random(seed), database_key=key)
    except (NoSuchExample, _OutOfBudget):
        pass
    if state["best"] is not None:
        state["best"] = _without_spare_groups(*state["best"], judge, state)
    elapsed = time.perf_counter() - t0
    result = SwarmResult(seed, state["runs"], elapsed, None, state["passed"], state["features"], state["states"])
    if state["first"] is not None:
        best, failed = state["best"]
        result.found = Found(best, failed, state["first"], state["found_runs"], state["found_at"],
                             state["runs"] - state["found_runs"], elapsed - state["found_at"])
    return result


def _without_spare_groups(scenario: Scenario, failed: list[CheckResult], judge, state: dict):
    """After Hypothesis's shrink, each whole group it kept is tried away (last first), once: the
    shrinker works on the draw's choices, and a group's removal renames the groups after it and
    moves every later choice, which it does not always get past. At most one run per group."""
    for name in [g.name for g in reversed(scenario.groups)]:
        if len(scenario.groups) == 1:
            break
        kept = [g for g in scenario.groups if g.name != name]
        if any(getattr(g.arrival, "group", None) == name for g in kept):
            continue  # another group joins it
        data = scenario.model_dump(mode="json")
        data["groups"] = [g.model_dump(mode="json") for g in kept]
        try:
            smaller = Scenario.model_validate(data)
        except ValueError:
            continue
        state["runs"] += 1
        again = judge.failures(smaller)
        if again:
            scenario, failed = smaller, again
    return scenario, failed


def found_name(seed: int, defect: str) -> str:
    return f"found_{defect or 'swarm'}_{seed}"


def write_found(found: Found, seed: int, defect: str, out_dir: Path = FOUND_DIR) -> Path:
    """The shrunk scenario as YAML, with a comment naming the seed, the checks that failed and
    their figures; `streamlab scenario run` replays it in either mode."""
    name = found_name(seed, defect)
    failed = ", ".join(r.name for r in found.failed)
    scenario = found.scenario.model_copy(update={
        "name": name, "description": f"found by the swarm (seed {seed}{', defect ' + defect if defect else ''}): "
                                     f"{failed} failed"})
    data = scenario.model_dump(mode="json", exclude_defaults=True)
    data["run_deadline_s"] = RUN_DEADLINE_S / 2  # a replay of a stream that never ends stops, in either mode
    data = {"name": data.pop("name"), "description": data.pop("description"), **data}
    g0, c0, t0 = size(found.first)
    g1, c1, t1 = size(found.scenario)
    head = [f"Found by `streamlab scenario swarm --seed {seed}"
            f"{' --lab-defect ' + defect if defect else ''}` in {found.runs_to_find} runs "
            f"({found.seconds_to_find:.0f} s), shrunk in {found.shrink_runs} more ({found.shrink_s:.0f} s)",
            f"from {g0} groups, {c0} clients, {t0} tokens to {g1} groups, {c1} clients, {t1} tokens.",
            *(f"{r.name}: {r.figure}" + (f" ({r.details[0]})" if r.details else "") for r in found.failed)]
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{name}.yaml"
    path.write_text("".join(f"# {line}\n" for line in head) +
                    yaml.safe_dump(data, sort_keys=False, default_flow_style=None, width=120))
    found.path = path
    return path
