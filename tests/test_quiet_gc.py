"""streamlab.quiet_gc: the collector off for a run, young garbage collected before it, the
collector's state given back after (even when the run raises)."""

from __future__ import annotations

import gc
import weakref

import pytest

from streamlab.quiet_gc import quiet_collector

pytestmark = pytest.mark.shares_cores  # nothing timed


class Node:
    def __init__(self) -> None:
        self.me = self  # a cycle: only the collector frees it


def young_cycle() -> weakref.ref:
    gc.collect()  # so the cycle made now is young
    return weakref.ref(Node())


def test_young_garbage_goes_before_the_run_and_none_is_collected_during_it():
    gone = young_cycle()
    assert gc.isenabled()
    with quiet_collector():
        assert gone() is None  # collected on the way in
        assert not gc.isenabled()
        made = [weakref.ref(Node()) for _ in range(5000)]  # past every threshold: nothing runs
        assert all(r() is not None for r in made)
    assert gc.isenabled()


def test_the_collectors_state_is_given_back_as_it_was_even_on_error():
    gc.disable()
    try:
        with quiet_collector():
            pass
        assert not gc.isenabled()  # it was off: it stays off
    finally:
        gc.enable()
    with pytest.raises(RuntimeError):
        with quiet_collector():
            raise RuntimeError("the run failed")
    assert gc.isenabled()
