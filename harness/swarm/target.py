"""`streamlab scenario swarm --target`: drawn scenarios run live against another server through
Toxiproxy (fewer and slower than in simulation), judged by what its profile can observe."""

from __future__ import annotations

from harness.judge.registry import BY_NAME
from harness.record.verdict import CheckResult
from harness.format.target import resolve_target
from harness.run.runner import RunContext, run_scenario
from harness.swarm.search import finding


class TargetJudge:
    """A swarm judge (harness.swarm.search.Judge's interface) for live runs on a target."""
    for_target = True
    shrink_runs = 40  # a live run takes seconds, not a fraction of one

    def __init__(self, target: str) -> None:
        self.ctx = RunContext(results_dir=None, target=resolve_target(target, None, None, None),
                              judge_parity_timing=False)

    def failures(self, scenario) -> list[CheckResult]:
        try:
            outcome = run_scenario(scenario, "live", self.ctx)
        except ValueError:
            return []  # nothing in it runs on this target (harness.targets.scope): not a finding
        # Timing checks need baselines a drawn scenario has not; the target's other checks stand, but
        # not a drawn premise that did not hold (a dropper that read its stream's end before it left:
        # nobody left early), as on our own server (harness.swarm.search.finding).
        return [r for r in outcome.checks if finding(r) and not (r.name in BY_NAME and BY_NAME[r.name].timing)]

    def close(self) -> None:
        self.ctx.close()
