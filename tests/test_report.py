"""The report (harness/judge/report.py): it renders a run and judges nothing."""

from __future__ import annotations

import pytest

import json

from rich.console import Console

from harness.judge import report
from harness.record.verdict import CheckResult
from harness.record.trace import StreamRecord
from tests.helpers import client_trace

# Times nothing (read for it): may run beside another such item under xdist (harness/cores_lock.py).
pytestmark = pytest.mark.shares_cores


def row(metric: str, ratio: float, ok: bool = True, **extra) -> dict:
    return {"scenario": "s", "group": "g", "metric": metric, "sim_s": 0.1, "live_s": 0.1 * ratio,
            "ratio": ratio, "ok": ok, "low": 0.6, "high": 1.6, **extra}


def rendered(table) -> str:
    console = Console(width=200, record=True)
    console.print(table)
    return console.export_text()


def trace():
    streams = [StreamRecord("readers", i, "reader", "p", {}, sent_at=0.0, token_times=[0.01, 0.02, 0.03],
                            ended_at=0.03, finish="length") for i in range(3)]
    return client_trace("overlap_4", "sim", streams)


def test_the_parity_spread_is_min_median_and_max_per_metric_with_the_count_out():
    rows = [row("ttft_s", 0.9), row("ttft_s", 1.1), row("ttft_s", 1.7, ok=False), row("completion_s", 1.0)]
    line = report.parity_summary(rows)
    assert "ttft_s live/sim min 0.90 median 1.10 max 1.70 over 3 groups" in line
    assert "completion_s live/sim min 1.00 median 1.00 max 1.00 over 1 groups" in line
    assert line.endswith("1 outside their bounds")


def test_the_parity_table_shows_each_ratio_its_bound_and_its_runs():
    text = rendered(report.parity_table([row("ttft_s", 1.25, ratios=[1.3, 1.25])]))
    assert "1.25 (2 runs)" in text and "0.6-1.6" in text and "125.0" in text
    assert "1.25 (3 runs)" in rendered(report.parity_table([row("ttft_s", 1.25, ratios=[1.7, 1.8, 1.25])]))


def test_the_group_table_has_a_row_per_group_with_its_outcomes():
    text = rendered(report.group_table(trace()))
    assert "readers" in text and "length 3" in text and "10.0/10.0" in text


def test_the_result_file_holds_the_trace_its_checks_and_the_baseline_figures(tmp_path):
    check = CheckResult("healthy", True, "no engine failure", "no failure")
    path = report.write_result(trace(), [check], tmp_path, baseline_figures={"x": 1.0})
    data = json.loads(path.read_text())
    assert path.name == "overlap_4-sim.json"
    assert len(data["streams"]) == 3 and data["baseline_figures"] == {"x": 1.0}
    assert data["checks"][0]["name"] == "healthy" and data["checks"][0]["passed"] is True


def test_the_timeline_draws_each_group_and_kind_as_one_set_of_marks(tmp_path, monkeypatch):
    """Tokens, spans, closes and releases drawn per group, not per stream (one artist each): the
    picture a suite draws for every run, in a fraction of the time."""
    import matplotlib.pyplot as plt

    streams = trace().streams + [StreamRecord("leavers", i, "dropper", "p", {}, sent_at=0.0, token_times=[0.01],
                                              closed_at=0.02, finish=None) for i in range(4)]
    drawn = []
    monkeypatch.setattr(plt, "close", lambda fig: drawn.append(fig))
    path = report.timeline_png(client_trace("overlap_4", "sim", streams), tmp_path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    ax = drawn[0].axes[0]
    labels = [line.get_label() for line in ax.get_lines()]
    assert labels == ["readers", "leavers", "client closed", "released"]  # 7 streams, 4 marker artists
    assert len(ax.collections) == 2  # one set of spans per group
    assert len(ax.get_lines()[2].get_xdata()) == 4  # every leaver's close
