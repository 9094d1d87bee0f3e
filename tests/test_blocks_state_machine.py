"""Random mixes of allocate, mark computed, release and evict on a BlockManager with prefix caching
on, prompts drawn from a two-token alphabet so that prefixes repeat: the books always balance.

After every step the pool's invariants hold, and every block a sequence holds as computed still
holds the tokens it was computed from: a cached block handed out, or evicted and handed out again,
while someone still reads it would show here. Wrong moves raise and change nothing. Once every
sequence is released and the cache evicted, the pool is whole and every acquisition of every
block was released exactly once.
"""

from __future__ import annotations

import pytest

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from streamlab.engine.blocks import BlockManager
from streamlab.errors import BlockAccountingError, DoubleRelease

# Times nothing (read for it): may run beside another such item under xdist (harness/cores_lock.py).
pytestmark = pytest.mark.shares_cores

PROMPTS = st.lists(st.sampled_from([1, 2]), min_size=1, max_size=6)
MAX_PROMPT = 12


class PrefixCacheMachine(RuleBasedStateMachine):
    @initialize(num_blocks=st.integers(3, 14), block_size=st.sampled_from([1, 2, 3]))
    def make(self, num_blocks: int, block_size: int) -> None:
        self.bm = BlockManager(num_blocks, prefix_caching=True, block_size=block_size)
        self.bs = block_size
        self.prompts: dict[int, list[int]] = {}  # live sequences
        self.tables: dict[int, list[int]] = {}
        self.computed_blocks: dict[int, int] = {}  # leading blocks each live sequence may read
        self.content: dict[int, tuple[int, ...]] = {}  # block -> the prefix its KV was computed from
        self.released: list[int] = []
        self.seen: list[list[int]] = []  # every prompt so far
        self.next_id = 0

    def blocks_for(self, prompt: list[int]) -> int:
        return -(-len(prompt) // self.bs)

    @rule(data=st.data(), suffix=PROMPTS, extra=st.integers(0, 2), prefill=st.booleans())
    def allocate(self, data, suffix: list[int], extra: int, prefill: bool) -> None:
        """Half the time the prompt continues an earlier one, as a conversation's next turn does.
        With `prefill`, the whole prompt is computed at once (most sequences' path)."""
        earlier = data.draw(st.sampled_from(self.seen)) if self.seen and data.draw(st.booleans()) else []
        prompt = (earlier + suffix)[:MAX_PROMPT]
        self.seen.append(prompt)
        seq_id, self.next_id = self.next_id, self.next_id + 1
        need = self.blocks_for(prompt) + extra
        if not self.bm.can_allocate(need, prompt):
            before = self.bm.cache_stats()
            with pytest.raises(BlockAccountingError):
                self.bm.allocate_with_prefix(seq_id, need, prompt)
            assert self.bm.cache_stats() == before and not self.bm.holds(seq_id)
            return
        got = self.bm.allocate_with_prefix(seq_id, need, prompt)
        assert len(got.table) == need and got.cached_blocks <= (len(prompt) - 1) // self.bs
        for i, block in enumerate(got.table):
            if i < got.cached_blocks:
                assert self.content.get(block) == tuple(prompt[:(i + 1) * self.bs]), "a hit on other content"
            else:
                self.content.pop(block, None)  # handed out to be written: what it held is gone
        self.prompts[seq_id], self.tables[seq_id] = prompt, got.table
        self.computed_blocks[seq_id] = got.cached_blocks
        if prefill:
            self.compute(seq_id, len(prompt))

    @precondition(lambda self: self.prompts)
    @rule(data=st.data())
    def mark_computed(self, data) -> None:
        seq_id = data.draw(st.sampled_from(sorted(self.prompts)))
        prompt = self.prompts[seq_id]
        self.compute(seq_id, data.draw(st.integers(0, len(prompt))))

    def compute(self, seq_id: int, upto: int) -> None:
        prompt = self.prompts[seq_id]
        self.bm.mark_computed(seq_id, upto)
        for i in range(self.computed_blocks[seq_id], upto // self.bs):
            self.content[self.tables[seq_id][i]] = tuple(prompt[:(i + 1) * self.bs])
        self.computed_blocks[seq_id] = max(self.computed_blocks[seq_id], upto // self.bs)

    @precondition(lambda self: self.prompts)
    @rule(data=st.data())
    def release(self, data) -> None:
        seq_id = data.draw(st.sampled_from(sorted(self.prompts)))
        assert self.bm.release(seq_id) == len(self.tables[seq_id])
        for table in (self.prompts, self.tables, self.computed_blocks):
            del table[seq_id]
        self.released.append(seq_id)

    @rule()
    def evict_all(self) -> None:
        evictable, evictions = self.bm.num_evictable, self.bm.cache_stats().evictions
        assert self.bm.evict_all() == evictable
        stats = self.bm.cache_stats()
        assert stats.evictable_blocks == 0 and stats.evictions == evictions + evictable

    # ---- wrong moves: each raises and changes nothing ----

    @precondition(lambda self: self.released)
    @rule(data=st.data())
    def release_twice(self, data) -> None:
        seq_id = data.draw(st.sampled_from(self.released))
        with pytest.raises((DoubleRelease, BlockAccountingError)):  # past the ledger's window: unknown
            self.bm.release(seq_id)

    @rule()
    def release_unknown(self) -> None:
        with pytest.raises(BlockAccountingError):
            self.bm.release(10_000 + self.next_id)
        with pytest.raises(BlockAccountingError):
            self.bm.mark_computed(10_000 + self.next_id, 1)

    @precondition(lambda self: self.prompts)
    @rule(data=st.data())
    def allocate_again(self, data) -> None:
        seq_id = data.draw(st.sampled_from(sorted(self.prompts)))
        with pytest.raises(BlockAccountingError):
            self.bm.allocate_with_prefix(seq_id, self.blocks_for(self.prompts[seq_id]), self.prompts[seq_id])

    # ---- after every step ----

    @invariant()
    def books_balance(self) -> None:
        if not hasattr(self, "bm"):
            return
        bm = self.bm
        assert bm.check_invariants() == []
        assert bm.num_free + bm.num_held + bm.num_evictable == bm.num_blocks
        assert bm.num_held == len({b for table in self.tables.values() for b in table})

    @invariant()
    def what_a_sequence_reads_is_what_it_computed(self) -> None:
        if not hasattr(self, "bm"):
            return
        free = set(self.bm._free)
        for seq_id, table in self.tables.items():
            assert free.isdisjoint(table), "a block in a table is on the free list"
            for i in range(self.computed_blocks[seq_id]):
                assert self.content.get(table[i]) == tuple(self.prompts[seq_id][:(i + 1) * self.bs])

    def teardown(self) -> None:
        if not hasattr(self, "bm"):
            return
        for seq_id in list(self.prompts):
            self.bm.release(seq_id)
        self.bm.evict_all()
        assert self.bm.num_free == self.bm.num_blocks and self.bm.check_invariants() == []
        ledger = self.bm.ledger
        assert ledger.block_acquisitions == ledger.block_releases
        assert [p for p in ledger.problems() if "double-release" not in p] == []


PrefixCacheMachine.TestCase.settings = settings(max_examples=300, stateful_step_count=40, deadline=None,
                                                suppress_health_check=[HealthCheck.too_slow])
test_blocks_with_prefix_caching = PrefixCacheMachine.TestCase
