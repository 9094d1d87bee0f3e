import pytest

from streamlab.policies import Action, BackpressureConfig, Policy, admits, backpressure

# Times nothing (read for it): may run beside another such item under xdist (harness/cores_lock.py).
pytestmark = pytest.mark.shares_cores


def decide(policy, queued, paused=False, since=None, now=10.0, stalled=None):
    """`stalled`: the client's share of the time at the limit; by default all of it."""
    cfg = BackpressureConfig(Policy(policy), queue_limit=8, stall_timeout_s=0.25)
    if stalled is None:
        stalled = now - since if since is not None else 0.0
    return backpressure(cfg, queued, paused, since, now, stalled)


@pytest.mark.parametrize("policy", ["naive", "unbounded"])
def test_naive_and_unbounded_never_act(policy):
    assert decide(policy, 100, since=0.0).action is Action.NONE


def test_pause_at_the_limit_and_resume_below_it():
    d = decide("pause", 8)
    assert d.action is Action.PAUSE and d.at_limit_since == 10.0
    assert decide("pause", 9, paused=True, since=1.0).action is Action.NONE  # paused, never dropped
    resumed = decide("pause", 7, paused=True, since=1.0)
    assert resumed.action is Action.RESUME and resumed.at_limit_since is None


def test_drop_only_after_the_stall_timeout_at_the_limit():
    assert decide("drop", 8).action is Action.NONE
    assert decide("drop", 8, since=9.8).action is Action.NONE  # 0.2 s at the limit
    assert decide("drop", 8, since=9.7).action is Action.DROP  # 0.3 s
    assert decide("drop", 7, since=9.0).at_limit_since is None  # caught up: the clock restarts


def test_only_the_clients_share_of_the_time_at_the_limit_counts():
    """A second at the limit, but the connection took its writes as they came: the server's own
    loop was late (busy with other writes, or waiting for the GIL), so nobody is dropped."""
    for policy in ("drop", "pause_then_drop"):
        assert decide(policy, 8, paused=True, since=9.0, stalled=0.0).action is not Action.DROP
        assert decide(policy, 8, paused=True, since=9.0, stalled=0.2).action is not Action.DROP
        assert decide(policy, 8, paused=True, since=9.0, stalled=0.3).action is Action.DROP


def test_pause_then_drop_pauses_first_then_drops():
    assert decide("pause_then_drop", 8).action is Action.PAUSE
    assert decide("pause_then_drop", 8, paused=True, since=9.9).action is Action.NONE
    assert decide("pause_then_drop", 8, paused=True, since=9.5).action is Action.DROP


def test_config_is_checked():
    with pytest.raises(ValueError):
        BackpressureConfig(queue_limit=0)
    with pytest.raises(ValueError):
        BackpressureConfig(stall_timeout_s=0)


def test_waiting_limit():
    assert admits(3, 4) and not admits(4, 4)
