"""Random mixes of submit, cancel, pause, resume and step: the books always balance.

After every operation the block pool's invariants hold; once drained, the pool is whole and
every admitted sequence was released exactly once, with exactly one finish per request.
"""

from __future__ import annotations

import pytest

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from streamlab.config import CacheConfig, EngineConfig
from streamlab.engine.engine import BatchEngine
from streamlab.models import load_model
from streamlab.sampling import SamplingParams
from tests.helpers import assert_clean, drain

# Times nothing (read for it): may run beside another such item under xdist (harness/cores_lock.py).
pytestmark = pytest.mark.shares_cores

TINY = load_model("tiny")


class EngineMachine(RuleBasedStateMachine):
    @initialize(max_batch=st.integers(1, 4), num_blocks=st.integers(6, 30), block_size=st.sampled_from([2, 4, 16]))
    def make(self, max_batch: int, num_blocks: int, block_size: int) -> None:
        self.engine = BatchEngine(TINY.model, EngineConfig(max_batch, CacheConfig(num_blocks, block_size)))
        self.submitted: list[str] = []
        self.finished: dict[str, str] = {}

    @rule(prompt_len=st.integers(1, 24), max_new=st.integers(1, 24), seed=st.integers(0, 3))
    def submit(self, prompt_len: int, max_new: int, seed: int) -> None:
        rid = f"r{len(self.submitted)}"
        cfg = self.engine.config.cache
        if cfg.blocks_for(prompt_len + max_new) > cfg.num_blocks:
            return  # refused at submit; covered elsewhere
        self.engine.submit(rid, [(seed * 31 + i) % 8000 + 1 for i in range(prompt_len)],
                           SamplingParams(max_new_tokens=max_new, ignore_eos=True))
        self.submitted.append(rid)

    @precondition(lambda self: self.submitted)
    @rule(data=st.data(), kind=st.sampled_from(["cancel", "pause", "resume", "stop"]))
    def wish(self, data, kind: str) -> None:
        rid = data.draw(st.sampled_from(self.submitted))
        getattr(self.engine, kind)(rid)

    @rule()
    def step(self) -> None:
        for f in self.engine.step().finished:
            assert f.request_id not in self.finished, f"{f.request_id} finished twice"
            self.finished[f.request_id] = f.reason.value

    @invariant()
    def books_balance(self) -> None:
        if hasattr(self, "engine"):
            assert self.engine.check_invariants() == []

    def teardown(self) -> None:
        if not hasattr(self, "engine"):
            return
        for rid in self.submitted:
            self.engine.resume(rid)
        out = drain(self.engine)
        for rid, f in out.finished.items():
            assert rid not in self.finished
            self.finished[rid] = f.reason.value
        assert sorted(self.finished) == sorted(self.submitted)
        assert_clean(self.engine)


EngineMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=40, deadline=None,
                                           suppress_health_check=[HealthCheck.too_slow])
test_engine_state_machine = EngineMachine.TestCase
