"""Load and SLOs relative to this machine, probed in the session.

A group may offer its load as a multiple of what this server sustains (`arrival: {kind: poisson,
rate_x_capacity: 2.5}`) and state its SLO as multiples of a lone request's times (`slo:
{ttft_x_lone: 60, tpot_x_lone: 30}`): 150 requests/s is a deeper overload for a slower machine,
2.5x capacity is the same overload on any. Before such a scenario runs, a probe runs through
the same backend with the same server options: one of the group's requests alone on an idle
server (its TTFT and TPOT), then a burst of BURST_PER_SLOT x max_batch of them at once (requests
completed per second of the burst's span: the capacity). The scenario is then resolved into
plain figures (rate_per_s, ttft_ms, tpot_ms, the deadline each request carries), which the
trace records with the probe's readings.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from harness.record.trace import Trace, metric_values, percentile
from harness.format.behaviours import Reader
from harness.format.arrivals import AtOnce, Poisson
from harness.format.scenario import GroupSpec, Scenario
from harness.format.expect import Expectations

BURST_PER_SLOT = 4  # the burst keeps every batch slot busy for about four requests each
BURST_AT_S = 0.5  # after the lone request (a few ms here; 50 ms would be a machine 10x slower)


@dataclass(frozen=True)
class Probe:
    """What the server did for one group's requests on this machine, now."""
    group: str
    lone_ttft_s: float
    lone_tpot_s: float
    requests_per_s: float

    def line(self) -> str:
        return (f"capacity probe for {self.group}: a lone request's TTFT {self.lone_ttft_s * 1e3:.1f}ms, TPOT "
                f"{self.lone_tpot_s * 1e3:.2f}ms; {self.requests_per_s:.1f} requests/s sustained")


def relative_groups(scenario: Scenario) -> list[GroupSpec]:
    return [g for g in scenario.groups if (isinstance(g.arrival, Poisson) and g.arrival.rate_x_capacity is not None)
            or (g.slo is not None and g.slo.relative) or g.request.ttft_deadline_ms == "slo"]


def probe_scenario(scenario: Scenario, group: GroupSpec) -> Scenario:
    request = group.request.model_copy(update={"ttft_deadline_ms": None})
    server = scenario.server.model_copy(update={"admission": "waiting-limit",
                                                "waiting_limit": max(scenario.server.waiting_limit,
                                                                     BURST_PER_SLOT * scenario.server.max_batch)})
    base = {"prompt": group.prompt, "request": request, "behaviour": Reader(kind="reader")}
    return Scenario(name=f"{scenario.name}__probe_{group.name}", seed=scenario.seed, modes=scenario.modes,
                    server=server, expect=Expectations(),
                    groups=[GroupSpec(name="lone", count=1, arrival=AtOnce(kind="at_once"), **base),
                            GroupSpec(name="burst", count=BURST_PER_SLOT * scenario.server.max_batch,
                                      arrival=AtOnce(kind="at_once", at_s=BURST_AT_S), **base)])


def measure(group: str, trace: Trace) -> Probe:
    lone = trace.group("lone")
    ttft = percentile(metric_values(lone, "ttft_s"), 50)
    gaps = metric_values(lone, "gap_s")
    burst = trace.group("burst")
    sent = [s.sent_at for s in burst if s.sent_at is not None]
    ended = [s.ended_at for s in burst if s.ended_at is not None and s.finished_normally]
    if ttft is None or not gaps or len(ended) < len(burst) or not sent:
        raise RuntimeError(f"{trace.scenario}: the capacity probe did not complete "
                           f"({len(ended)}/{len(burst)} burst requests finished, lone TTFT {ttft})")
    return Probe(group, ttft, sum(gaps) / len(gaps), len(ended) / (max(ended) - min(sent)))


def resolve(scenario: Scenario, run: Callable[[Scenario], Trace]) -> tuple[Scenario, list[Probe]]:
    """The scenario with its relative figures made absolute for this machine now, and the probes."""
    groups, probes = [], []
    relative = {g.name for g in relative_groups(scenario)}
    for g in scenario.groups:
        if g.name not in relative:
            groups.append(g)
            continue
        p = measure(g.name, run(probe_scenario(scenario, g)))
        probes.append(p)
        update: dict = {}
        if isinstance(g.arrival, Poisson) and g.arrival.rate_x_capacity is not None:
            update["arrival"] = g.arrival.model_copy(update={"rate_per_s": g.arrival.rate_x_capacity * p.requests_per_s,
                                                             "rate_x_capacity": None})
        slo = g.slo
        if slo is not None and slo.relative:
            slo = slo.model_copy(update={
                "ttft_ms": slo.ttft_ms if slo.ttft_x_lone is None else round(slo.ttft_x_lone * p.lone_ttft_s * 1e3, 3),
                "tpot_ms": slo.tpot_ms if slo.tpot_x_lone is None else round(slo.tpot_x_lone * p.lone_tpot_s * 1e3, 3),
                "ttft_x_lone": None, "tpot_x_lone": None})
            update["slo"] = slo
        if g.request.ttft_deadline_ms == "slo":
            update["request"] = g.request.model_copy(update={"ttft_deadline_ms": slo.ttft_ms})
        groups.append(g.model_copy(update=update))
    if not probes:
        return scenario, []
    return scenario.model_copy(update={"groups": groups}), probes
