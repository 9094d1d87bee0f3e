"""Overload under the two admission rules: scenarios/overload_waiting_limit.yaml and
overload_deadline.yaml (the same Poisson load at 2.5x what the server sustains, probed), each
run in simulation and live. Goodput: requests that met the group's SLO, per second of the run."""

from __future__ import annotations

from harness.run import runner
from harness.record.trace import goodput, metric_values, outcomes, percentile
from harness.format.load import load_by_name

RULES = ("waiting_limit", "deadline")


def figures(mode: str) -> dict[str, dict]:
    """Per rule: goodput, outcomes and the TTFT of the admitted requests; every check must hold."""
    out = {}
    for rule in RULES:
        scenario = load_by_name(f"overload_{rule}")
        if mode not in scenario.modes:
            # The files are live only (their goodput bounds belong to live capacity, see them);
            # the rules are still compared with each other in simulation, asked for here.
            scenario = scenario.model_copy(update={"modes": [mode]})
        outcome = runner.run_scenario(scenario, mode, runner.RunContext(results_dir=None))
        failed = [c.line() for c in outcome.checks if c.ok is False]
        streams = outcome.trace.group("clients")
        admitted = [s for s in streams if s.status == 200]
        ttft = metric_values(admitted, "ttft_s")
        slo = outcome.trace.spec.slos()["clients"]  # as the run resolved it: the files' SLO is relative
        out[rule] = {**goodput(streams, slo), "outcomes": outcomes(streams), "failed_checks": failed,
                     "ttft_p50_admitted_s": percentile(ttft, 50), "ttft_p99_admitted_s": percentile(ttft, 99)}
    return out


def run(say) -> dict:
    out = {}
    for mode in ("sim", "live"):
        say(f"overload: both rules, {mode}")
        out[mode] = figures(mode)
    return out
