"""The checks (harness/judge/checks.py), each on a trace made to pass it and one made to fail it."""

from __future__ import annotations

import pytest

from harness.judge.checks import arrivals
from harness.format.load import load_by_name
from harness.record.trace import StreamRecord
from tests.helpers import client_trace

# Times nothing (read for it): may run beside another such item under xdist (harness/cores_lock.py).
pytestmark = pytest.mark.shares_cores


def test_the_arrivals_check_fails_a_joiner_sent_after_its_group_ended():
    """late_joiners_8's joiners must come while the running streams run: one sent after they all
    ended would pass its latency bound for nothing."""
    def record(group: str, i: int, sent: float, end: float) -> StreamRecord:
        return StreamRecord(group, i, "reader", "p", {}, sent_at=sent, token_times=[sent + 0.01, end],
                            ended_at=end, finish="length")
    scenario = load_by_name("late_joiners_8")
    running = [record("running", i, 0.0, 0.52) for i in range(8)]
    ok = client_trace("late_joiners_8", "sim", running + [record("joiners", 0, 0.3, 0.32)])
    assert arrivals(scenario, ok).passed
    late = client_trace("late_joiners_8", "sim", running + [record("joiners", 0, 0.6, 0.62)])
    check = arrivals(scenario, late)
    assert not check.passed and check.details == ["joiners: 1 sent after running ended"]
