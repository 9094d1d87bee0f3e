"""The swarm (issue 24): draws are valid scenarios that leave features out; it finds each seeded
defect and shrinks it; the shrunk files fail in both modes with the defect and pass without it;
and a fixed seed over a fixed budget finds nothing in our own server."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from harness.targets.engines import llama_server_missing
from harness.live.backend import live_unavailable
from harness.format.scenario import Scenario
from harness.format.load import load
from harness.swarm.search import Judge, search, size, write_found
from harness.swarm.draw import BEHAVIOURS, FEATURES, scenarios
from streamlab.defects import DEFECTS
from tests.peers import needs_peer

FOUND = Path(__file__).parent / "fixtures" / "found"

# The CI swarm: this seed and budget, about two minutes here. A failure is a real defect in our
# server or harness: fix it, and its shrunk file (printed, and written to scenarios/found/)
# joins the library.
CI_SEED, CI_SECONDS = 24, 110.0

# Each seeded defect's seed and the runs it took to find here (docs/HARNESS.md has the table).
# The draws are Hypothesis's, seeded, so the count is mostly the same on any machine with the same
# Hypothesis; the budget allows 2x for an upgrade that draws differently.
# Runs to find each from its seed, measured in a process that had imported every test module
# first, as a CI worker has (the draws depend on the seed alone since harness/swarm/search.py
# stopped Hypothesis drawing constants from loaded modules: last_free_block was not found in 52
# runs in a graded CI worker, 11 from the same seed either way now). The search is given twice
# the count and at least 30 runs, for a Hypothesis upgrade that draws differently.
DEFECT_SEEDS = {"stop_across_tokens": (1, 121), "shared_seed_rng": (1, 28), "last_free_block": (1, 11),
                "first_stop_only": (3, 37), "dropped_text_delta": (1, 3), "usage_off_by_one": (1, 3),
                "stop_tail_after_stop": (3, 5), "skipped_event_index": (1, 3), "paused_leaver_kept": (2, 247)}
# paused_leaver_kept needs a padded slow leaver with a small buffer that lingers: seeds 1 and 2 ran
# 900 and 247 runs to it; its search runs with STREAMLAB_SWARM_PROOF=1 (slow_reader_pause_leave
# catches it in both modes in every run: tests/test_states.py).
SLOW_TO_FIND = {"paused_leaver_kept"}


@pytest.mark.shares_cores  # draws and validates: no clock
@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(scenarios())
def test_every_draw_is_a_valid_scenario_that_uses_only_its_features(scenario: Scenario):
    features = set(scenario.description.split("features: ", 1)[1].split(", "))
    assert Scenario.model_validate(scenario.model_dump(mode="json")) == scenario  # it round-trips
    for g in scenario.groups:
        kind = g.behaviour.kind
        assert kind == "reader" or kind in features, (kind, features)
        assert g.arrival.kind == "at_once" or g.arrival.kind in features
        for t in (g.network.toxics if g.network else []):
            assert t.type in features
        assert not g.request.stop or "stops" in features
    assert scenario.server.policy.value == "pause" or "policy" in features
    assert not scenario.server.fault_step or "faults" in features
    assert not scenario.server.lab_defect


@pytest.mark.shares_cores
def test_draws_leave_features_out():
    """Swarm testing: over many draws every feature appears, and no draw has them all."""
    seen, largest = set(), 0

    @settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(scenarios())
    def draw(scenario):
        nonlocal largest
        words = scenario.description.split("features: ", 1)[1]
        used = set(words.split(", ")) if words != "none" else set()
        seen.update(used)
        largest = max(largest, len(used))

    draw()
    assert set(BEHAVIOURS) <= seen
    assert largest < len(FEATURES)


# In simulation, on its virtual clock, with a budget of runs: beside another item it draws the
# same scenarios, only slower (its shrink's 300 s limit is 10x what one takes here). expected_s:
# how long each took in the shared phase here, for its order on a machine that never ran it.
@pytest.mark.shares_cores(expected_s=25)
@pytest.mark.parametrize("defect", sorted(DEFECTS))
def test_the_swarm_finds_each_seeded_defect_and_shrinks_it(defect: str, tmp_path):
    if defect in SLOW_TO_FIND and not os.environ.get("STREAMLAB_SWARM_PROOF"):
        pytest.skip(f"{defect} takes {DEFECT_SEEDS[defect][1]} runs from its seed: STREAMLAB_SWARM_PROOF=1 searches")
    seed, runs = DEFECT_SEEDS[defect]
    result = search(seed=seed, runs=max(2 * runs, 30), defect=defect, database=None)
    found = result.found
    assert found is not None, f"{defect}: not found in {result.runs} runs"
    groups, clients, _ = size(found.scenario)
    assert groups <= 2 and clients <= 4, (defect, size(found.first), size(found.scenario))
    path = write_found(found, seed, defect, tmp_path)
    assert load(path).server.lab_defect == defect  # what it wrote replays
    assert path.read_text().startswith(f"# Found by `streamlab scenario swarm --seed {seed} --lab-defect {defect}`")


def _without_defect(scenario: Scenario) -> Scenario:
    server = scenario.server.model_copy(update={"lab_defect": ""})
    return scenario.model_copy(update={"server": server})


@pytest.mark.parametrize("live", [False, True], ids=["sim", "live"])
@pytest.mark.parametrize("path", sorted(FOUND.glob("*.yaml")), ids=lambda p: p.stem)
def test_a_shrunk_defect_fails_and_passes_without_the_defect(path: Path, live: bool):
    """Each seeded defect's shrunk file (written by the swarm from its seed) fails in this mode,
    on the same checks the swarm saw, and passes once the defect is removed."""
    scenario = load(path)
    judge = Judge(live=live)
    failed = {r.name for r in judge.failures(scenario)}
    assert failed, f"{path.name}: passed with its defect"
    assert not judge.failures(_without_defect(scenario)), f"{path.name}: failed without its defect"


# In simulation, every verdict on its virtual clock; beside another item it draws fewer scenarios
# in its fixed budget (about 800 alone, it asks 20).
@pytest.mark.shares_cores(expected_s=CI_SECONDS)
def test_the_ci_swarm_finds_nothing_in_our_server(tmp_path):
    result = search(seed=CI_SEED, time_s=CI_SECONDS, database=None)
    if result.found is not None:
        path = write_found(result.found, CI_SEED, "", tmp_path)
        pytest.fail(f"the swarm found a failure after {result.found.runs_to_find} runs:\n{path.read_text()}")
    assert result.runs >= 20, f"only {result.runs} scenarios in {CI_SECONDS} s"


def _target_swarm(target: str, seed: int, runs: int):
    from harness.swarm.target import TargetJudge

    judge = TargetJudge(target)
    try:
        return search(seed=seed, runs=runs, database=None, judge=judge, shrink_runs=5)
    finally:
        judge.close()


@pytest.mark.skipif(live_unavailable() is not None, reason=str(live_unavailable()))
def test_the_swarm_runs_drawn_scenarios_live_against_a_target():
    """`swarm --target`: draws only what another server can run, live through Toxiproxy, judged by
    the target profile's observable checks. Our own server through its OpenAI route is a target
    that must pass."""
    result = _target_swarm("streamlab-openai", seed=3, runs=3)
    assert result.runs == 3 and result.found is None, result.found and result.found.failed


@needs_peer(llama_server_missing())
@pytest.mark.skipif(live_unavailable() is not None, reason=str(live_unavailable()))
def test_the_swarm_runs_against_llama_server():
    """The same against llama.cpp's server: a drawn scenario runs there to its verdicts. What it
    finds is printed (not asserted: a find there is a finding about llama-server, to be recorded
    in harness/targets/findings.py once shrunk and confirmed)."""
    result = _target_swarm("llamacpp", seed=3, runs=2)
    assert result.runs >= 1
    if result.found is not None:
        print("found on llama-server:", [(r.name, r.figure) for r in result.found.failed])
