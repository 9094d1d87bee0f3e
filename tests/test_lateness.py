"""The harness's own schedule (harness/judge/lateness.py): a run whose clients were sent late, or
whose client loop lagged, reports its timing checks not observable, naming the lateness; the same
run on schedule is judged as before."""

from __future__ import annotations

import time

import pytest

from harness.format.load import load_by_name
from harness.judge.bounds import LOOP_LAG_S, SEND_LATE_S
from harness.judge.lateness import TIMING_DEPENDENT, behind
from harness.record.trace import StreamRecord
from harness.run import runner
from tests.helpers import client_trace


def sent(late_s: float) -> StreamRecord:
    return StreamRecord("g", 0, "reader", "p", {}, sent_at=1.0 + late_s, planned_at=1.0, due_at=1.0)


@pytest.mark.shares_cores
def test_behind_names_the_lateness_and_the_lag_past_their_bounds():
    on_time = client_trace("overlap_8", "live", [sent(0.001) for _ in range(10)])
    assert behind(on_time) is None
    late = client_trace("overlap_8", "live", [sent(0.001)] * 5 + [sent(SEND_LATE_S * 2)] * 5)
    assert "clients sent late: p99" in behind(late)
    lagging = client_trace("overlap_8", "live", [sent(0.0)])
    lagging.loop_lag_ms = {"p50": 1.0, "p99": LOOP_LAG_S * 2e3, "max": 500.0}
    assert "the client loop lagged" in behind(lagging)
    # held back by max_clients_at_once is the scenario's own limit: due when its slot came free
    held = StreamRecord("g", 0, "reader", "p", {}, sent_at=3.0, planned_at=1.0, due_at=3.0)
    assert held.send_lateness == 0.0


def test_a_harness_that_stalls_per_client_makes_its_timing_not_observable_live(monkeypatch):
    """The client loop blocked 50 ms as each client starts (a harness too slow for its load): the
    eighth of overlap_8's clients goes out 350 ms late. Its timing checks are not observable,
    naming the lateness; every other check is judged as before. Without the stall it passes."""
    from harness.clients.client import Client
    from harness.live.backend import live_unavailable

    scenario = load_by_name("overlap_8")
    if live_unavailable(scenario):
        pytest.skip(live_unavailable(scenario))
    on_time = runner.run_scenario(scenario, "live", runner.RunContext(results_dir=None))
    assert on_time.ok and all(c.observed for c in on_time.checks if c.name in TIMING_DEPENDENT), \
        [c.line() for c in on_time.checks]
    run = Client.run

    async def stalled(self, *args, **kwargs):
        time.sleep(0.05)  # blocks the loop, as a harness doing too much per client would
        return await run(self, *args, **kwargs)
    monkeypatch.setattr(Client, "run", stalled)
    late = runner.run_scenario(scenario, "live", runner.RunContext(results_dir=None))
    timing = [c for c in late.checks if c.name in TIMING_DEPENDENT]
    assert timing and all(not c.observed and "clients sent late" in c.figure for c in timing), \
        [c.line() for c in timing]
    assert all(c.ok for c in late.checks if c.name not in TIMING_DEPENDENT), [c.line() for c in late.checks]
