"""harness/compare/: the latency regression gate. Its statistics on figures made up to the purpose;
its sides' forms and their errors; and live, the gate run on our own server: against itself it
reports nothing, against a lab slowdown of itself (computing) and against a git revision whose
engine step waits half its time again (waiting) it reports a regression, naming the figures.
"""

from __future__ import annotations

import json
import random
import subprocess
from argparse import Namespace
from pathlib import Path

import pytest
from rich.console import Console

from harness.compare import report
from harness.compare.command import run as compare
from harness.compare.gate import ScenarioGate, Settings, SideRuns, schedule
from harness.compare.lab_revision import commit_with, remove_worktrees, waiting_step
from harness.compare.sides import REPO, SideError, parse_side
from harness.compare.stats import judge, least_rounds, smallest_detectable
from harness.format.load import load_by_name

SCENARIO = "disconnect_fin_mid"  # 1.3 s a run; its readers' gaps move with the engine's step alone


def noisy(n: int, seed: int, spread: float = 0.05) -> list[float]:
    rng = random.Random(seed)
    return [0.1 * (1 + rng.gauss(0, spread)) for _ in range(n)]


# ---- the statistics ----

@pytest.mark.shares_cores
def test_same_figures_are_the_same_and_a_consistent_slowdown_is_a_regression():
    base, cand = noisy(16, 1), noisy(16, 2)
    assert judge("g ttft_s p50", base, cand, 0.01, 0.10).verdict == "same"
    slower = judge("g ttft_s p50", base, [c * 1.25 for c in cand], 0.01, 0.10)
    assert slower.verdict == "regression" and slower.low > 1.1 and slower.p < 0.01, slower
    # significant but small: under the threshold it is not a regression
    assert judge("g ttft_s p50", base, [b * 1.05 for b in base], 0.01, 0.10).verdict == "same"
    # throughput: lower is worse
    assert judge("run tokens_per_s", base, [c / 1.25 for c in cand], 0.01, 0.10).verdict == "regression"
    assert judge("run tokens_per_s", base, [c * 1.25 for c in cand], 0.01, 0.10).verdict == "improvement"
    assert judge("g ttft_s p50", base, [c / 1.25 for c in cand], 0.01, 0.10).verdict == "improvement"


@pytest.mark.shares_cores
def test_one_hiccup_round_does_not_hide_a_slowdown_at_the_default_rounds():
    base, cand = noisy(16, 3), [c * 1.25 for c in noisy(16, 4)]
    base[-1] *= 1.6  # the machine paused in one baseline run (seen: 222 ms among 161-175)
    assert judge("g completion_s p50", base, cand, 0.01, 0.10).verdict == "regression"


@pytest.mark.shares_cores
def test_rounds_too_few_for_alpha_are_refused_and_the_detectable_effect_is_measured():
    assert least_rounds(0.01) == 8 and least_rounds(0.05) == 6
    with pytest.raises(ValueError, match="never reach"):
        Settings(rounds=7, alpha=0.01).check()
    assert schedule(Settings(rounds=4)) == [("baseline", "candidate"), ("candidate", "baseline")] * 2
    shuffled = schedule(Settings(rounds=16, order="shuffle", seed=5))
    assert shuffled == schedule(Settings(rounds=16, order="shuffle", seed=5)) and len(set(shuffled)) == 2
    quiet = smallest_detectable("g gap_s p50", noisy(16, 5, 0.01), noisy(16, 6, 0.01), 0.01, 0.10)
    loud = smallest_detectable("g gap_s p50", noisy(16, 5, 0.3), noisy(16, 6, 0.3), 0.01, 0.10)
    assert quiet is not None and quiet <= 1.12 and (loud is None or loud > quiet)
    with pytest.raises(ValueError, match="alpha"):
        Settings(alpha=0).check()


@pytest.mark.shares_cores
def test_a_scenarios_figures_are_one_family_and_too_few_rounds_for_it_do_not_pass():
    """Holm over a scenario's figures: the A/A false alarm seen here (one of 24 figures, 1.16x at p
    0.0034) is not reported, a slowdown every round shows still is; a gate whose rounds cannot
    reach alpha / m says so and does not pass."""
    from dataclasses import replace
    from harness.compare.gate import finish
    from harness.compare.stats import holm

    quiet = [judge(f"g{i} gap_s p50", noisy(16, i), noisy(16, 100 + i), 0.01, 0.1) for i in range(23)]
    alarm = replace(quiet[0], figure="droppers ttft_s p50", effect=1.156, p=0.0034, verdict="regression")
    assert [j.verdict for j in holm(quiet + [alarm], 0.01, 0.1)] == ["same"] * 24
    slower = judge("g gap_s p50", noisy(16, 7), [c * 1.25 for c in noisy(16, 8)], 0.01, 0.1)
    assert holm(quiet + [slower], 0.01, 0.1)[-1].verdict == "regression"
    runs = SideRuns(figures=[{"g gap_s p50": 0.1}] * 8)
    few = [ScenarioGate("s", runs, runs, [slower] * 5)]
    finish(few, Settings(rounds=8))
    assert few[0].refused and "give --rounds 10" in few[0].refused
    assert report.exit_code(few) == report.COULD_NOT_RUN


@pytest.mark.shares_cores
def test_outcomes_are_judged_before_timing_and_set_the_exit_code():
    same = judge("g ttft_s p50", noisy(8, 1), noisy(8, 2), 0.01, 0.1)
    fine = ScenarioGate("s", SideRuns(), SideRuns(), [same])
    assert report.exit_code([fine]) == report.PASS
    leaked = ScenarioGate("s", SideRuns(), SideRuns(broken=["round 2: leak_free: 3 blocks held"]), [same])
    assert report.exit_code([leaked]) == report.REGRESSION
    assert "outcomes broken in s (on the candidate side)" in report.headline([leaked], ("here", "there"))
    assert "leak_free" in report.markdown([leaked], ("here", "there"), Settings())
    refused = ScenarioGate("s", SideRuns(), SideRuns(), refused="no toxiproxy-server")
    assert report.exit_code([fine, refused]) == report.COULD_NOT_RUN
    slower = judge("g ttft_s p50", noisy(16, 1), [c * 1.3 for c in noisy(16, 2)], 0.01, 0.1)
    both = [refused, ScenarioGate("t", SideRuns(), SideRuns(), [slower])]
    assert report.exit_code(both) == report.COULD_NOT_RUN and "t g ttft_s p50" in report.headline(both, ("a", "b"))


# ---- the sides ----

@pytest.mark.shares_cores
def test_sides_parse_and_a_mistake_names_what_was_expected():
    assert parse_side("here").ours and parse_side("here").server == {}
    assert parse_side("here:max_batch=8,lab=true").server == {"max_batch": 8, "lab": True}
    assert parse_side("llamacpp -t 1").target.command[-2:] == ["-t", "1"]
    assert parse_side("http://127.0.0.1:9").target.url == "http://127.0.0.1:9"
    for spec, says in [("here:max_batchh=8", "unknown server option 'max_batchh'"),
                       ("here:max_batch", "not KEY=VALUE"),
                       ("ref:no-such-revision-here", "not a git revision"),
                       ("cmd:llama-server -m x", "needs {port}"),
                       ("nginx", "a side is here"),
                       ("http://10.0.0.1:8000", "--allow-remote 10.0.0.1")]:
        with pytest.raises(SideError, match=says):
            parse_side(spec)
    with pytest.raises(SideError, match="max_batch"):
        parse_side("here:max_batch=0").scenario_for(load_by_name(SCENARIO))


def gate(tmp_path: Path, **kw) -> tuple[int, dict]:
    args = Namespace(files=[REPO / "scenarios" / f"{SCENARIO}.yaml"], baseline="here", candidate="here",
                     lab_step_slowdown=1.0, rounds=16, alpha=0.01, threshold=0.10, order="abba", seed=0,
                     out=tmp_path / "out")
    for k, v in kw.items():
        setattr(args, k, v)
    code = compare(Console(width=160), args)
    return code, json.loads((args.out / "compare.json").read_text())


DECODE = ("gap_s", "completion_s", "tokens_per_s")  # the figures a slower step moves most


def regressions(result: dict) -> list[str]:
    return [f["figure"] for s in result["scenarios"] for f in s["figures"] if f["verdict"] == "regression"]


# ---- live: our server against itself and a slower self ----

def test_the_gate_passes_our_server_against_itself_and_fails_it_slower_by_computing(tmp_path):
    code, same = gate(tmp_path)
    assert code == report.PASS and not regressions(same), same["headline"]
    # the A/A run says what it could have caught: the readers' gaps move with every step
    assert any(v for v in same["scenarios"][0]["smallest_detectable"].values()), same["scenarios"][0]
    code, slower = gate(tmp_path, lab_step_slowdown=1.25)
    assert code == report.REGRESSION, slower["headline"]
    # a decode slowdown: what is flagged is the pace's (gaps, completions, tokens/s), named in the headline
    assert any(m in f for f in regressions(slower) for m in DECODE), slower["headline"]
    assert (tmp_path / "out" / "compare.md").read_text().startswith("### streamlab scenario compare: FAILED")


def test_the_gate_fails_a_git_revision_whose_step_waits(tmp_path):
    slower = commit_with(waiting_step(1.5), message="test: a step 1.5x slower by waiting")
    try:
        code, result = gate(tmp_path, files=[REPO / "scenarios" / "overlap_8.yaml"], rounds=12,
                            baseline="ref:HEAD", candidate=f"ref:{slower}")
    finally:  # a worktree per run of this test would pile up in .tools/compare
        remove_worktrees(slower, "HEAD")
    assert code == report.REGRESSION, result["headline"]
    assert any(m in f for f in regressions(result) for m in DECODE), result["headline"]


def test_pytest_turns_live_items_into_comparison_items(tmp_path):
    """`pytest scenarios/x.yaml --compare-baseline SIDE`: the live item fails on a slower candidate,
    with the Markdown summary as its message; the simulated item runs as before."""
    import sys
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0",
                           str(REPO / "scenarios" / "overlap_8.yaml"), "-k", "live", "--compare-baseline", "here",
                           "--compare-candidate", "here:lab=true,lab_step_slowdown=1.5", "--compare-rounds", "16"],
                          # its own folder: its results, and its cores lock (this test holds ours)
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    # 16 rounds, not 12: under Holm a figure of overlap_8's five needs its rounds near unanimous at 12
    # (the smallest p of 12 is 0.0005 against alpha/5 = 0.002), and a fresh-clone CI run missed the
    # 1.5x slowdown on every figure there (it is caught here in every run); at 16 one or two noisy
    # rounds still leave each figure below its level.
    assert done.returncode == 1, done.stdout[-2000:]
    assert "streamlab scenario compare: FAILED" in done.stdout and "**regression**" in done.stdout, done.stdout[-2000:]
