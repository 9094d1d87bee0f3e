"""The server states a run reaches (harness.record.trace.states_reached): read from our server's
books, reported by the swarm, and reached by the library. Its file for a paused stream whose client
hangs up (slow_reader_pause_leave) catches the seeded defect that never cancels such a stream, in
simulation and live."""

from __future__ import annotations

import pytest

from harness.format.load import load_by_name
from harness.record.trace import SERVER_STATES, states_reached
from harness.run import runner
from tests.helpers import client_trace, skip_unless_live

SCENARIO = "slow_reader_pause_leave"


@pytest.mark.shares_cores
def test_states_are_read_from_the_books_and_none_from_a_target():
    trace = client_trace("x", "sim", [])
    trace.server = {"streams_paused": 3, "cancellations": {"slow_client": 0}, "streams_resumed": 1,
                    "cancelled_while": {"waiting": 0, "running": 2, "paused": 1}, "engine_step_errors": 0}
    assert states_reached(trace) == {"paused", "resumed", "cancelled_running", "cancelled_paused"}
    assert set(SERVER_STATES) >= states_reached(trace)
    trace.server = {}  # a target's books say nothing of them
    assert states_reached(trace) == set()


def _verdicts(mode: str, defect: str = "") -> tuple[dict[str, bool | None], set[str]]:
    outcome = runner.run_scenario(load_by_name(SCENARIO), mode,
                                  runner.RunContext(results_dir=None, lab_defect=defect))
    return {c.name: c.passed for c in outcome.checks}, states_reached(outcome.trace)


def _caught(mode: str) -> None:
    clean, states = _verdicts(mode)
    assert "cancelled_paused" in states, states  # the file reaches its state
    assert clean["leak_free"] and clean["exactly_once"] and clean["release_within"], clean
    kept, _ = _verdicts(mode, "paused_leaver_kept")
    assert kept["leak_free"] is False and kept["exactly_once"] is False, kept


@pytest.mark.shares_cores  # a simulation: every figure on its virtual clock
def test_a_paused_stream_whose_client_leaves_is_released_and_the_defect_is_caught_in_simulation():
    _caught("sim")


def test_a_paused_stream_whose_client_leaves_is_released_and_the_defect_is_caught_live():
    skip_unless_live(SCENARIO)
    _caught("live")
