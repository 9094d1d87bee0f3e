"""Goodput arithmetic: a request counts when it finished and met both its TTFT and TPOT SLOs."""

import pytest

from harness.record.trace import StreamRecord
from harness.record.trace import goodput, meets_slo
from harness.format.scenario import Slo
from harness.format.load import ScenarioError, load

# Times nothing (read for it): may run beside another such item under xdist (harness/cores_lock.py).
pytestmark = pytest.mark.shares_cores


def record(sent: float, times: list[float], finish: str | None = "length", status: int = 200) -> StreamRecord:
    r = StreamRecord("g", 0, "reader", "p", {}, sent_at=sent, status=status, token_times=times, finish=finish)
    r.ended_at = times[-1] if times else sent
    return r


def test_ttft_and_tpot_are_each_held_to_their_slo():
    slo = Slo(ttft_ms=100, tpot_ms=10)
    assert meets_slo(record(0.0, [0.1, 0.11, 0.12]), slo)  # 100 ms, then 10 ms a token: on the line
    assert not meets_slo(record(0.0, [0.101, 0.11]), slo)  # first token 1 ms late
    assert not meets_slo(record(0.0, [0.05, 0.08, 0.11]), slo)  # 30 ms a token
    assert meets_slo(record(0.0, [0.05, 0.5]), Slo(ttft_ms=100))  # no TPOT bound
    assert meets_slo(record(0.0, [0.05]), slo)  # one token: no TPOT to hold


def test_an_slo_relative_to_a_lone_request_is_refused_until_a_run_resolves_it():
    """ttft_x_lone has no milliseconds before the capacity probe: judged as it is, every finished
    request met it (benchmarks/overload.py did so once: the waiting limit read 45% in simulation)."""
    with pytest.raises(ValueError, match="resolved"):
        meets_slo(record(0.0, [0.05, 0.06]), Slo(ttft_x_lone=30))


def test_refused_cut_short_and_unfinished_requests_never_count():
    slo = Slo(ttft_ms=1000)
    assert not meets_slo(record(0.0, [], finish=None, status=429), slo)
    assert not meets_slo(record(0.0, [0.01], finish="deadline_expired"), slo)
    assert not meets_slo(record(0.0, [0.01, 0.02], finish=None), slo)  # the client left


def test_goodput_is_good_requests_per_second_of_the_groups_span():
    slo = Slo(ttft_ms=100)
    streams = [record(0.0, [0.05, 1.0]), record(0.5, [0.7, 2.0]), record(1.0, [1.05, 4.0]),
               record(1.5, [], finish=None, status=429)]
    g = goodput(streams, slo)
    assert (g["good"], g["requests"]) == (2, 4)  # the second was 200 ms late, the fourth refused
    assert g["fraction"] == 0.5 and g["span_s"] == pytest.approx(4.0) and g["per_s"] == pytest.approx(0.5)


BASE = """name: {name}
groups:
  - name: a
    behaviour: {{kind: reader}}
{extra}"""


def test_goodput_must_name_a_group_with_an_slo(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(BASE.format(name="s", extra="expect:\n  goodput: {a: 0.5}\n"))
    with pytest.raises(ScenarioError, match=r"s\.yaml.*expect\.goodput\.a.*without an slo"):
        load(path)
    path.write_text(BASE.format(name="s", extra="    slo: {}\n"))
    with pytest.raises(ScenarioError, match=r"slo.*give ttft_ms or ttft_x_lone"):
        load(path)
