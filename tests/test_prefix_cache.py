"""Prefix caching in the BlockManager: keys, sharing, LRU eviction, admission, and every wrong move raising."""

import hashlib

import pytest

from streamlab.engine.blocks import BlockManager
from streamlab.engine.prefix_cache import block_keys
from streamlab.errors import BlockAccountingError, DoubleRelease

# Times nothing (read for it): may run beside another such item under xdist (harness/cores_lock.py).
pytestmark = pytest.mark.shares_cores

BS = 4  # tokens per block in these tests


def cached(num_blocks: int) -> BlockManager:
    return BlockManager(num_blocks, prefix_caching=True, block_size=BS)


def computed(bm: BlockManager, seq_id: int, prompt: list[int], num_blocks: int) -> list[int]:
    """Allocate for a prompt and compute all of it, as a prefill would."""
    table = bm.allocate_with_prefix(seq_id, num_blocks, prompt).table
    bm.mark_computed(seq_id, len(prompt))
    return table


def test_keys_are_a_hash_chain_over_content_and_position():
    a, b = [1, 2, 3, 4], [5, 6, 7, 8]
    assert len(block_keys(a + b + [9], BS)) == 2  # the partial last block has no key
    assert block_keys(a + b, BS)[0] == block_keys(a + a, BS)[0]
    assert block_keys(a + b, BS)[1] != block_keys(a + b, BS)[0]
    assert block_keys(b + b, BS)[1] != block_keys(a + b, BS)[1]  # same tokens, different prefix
    root = hashlib.blake2b(b"", digest_size=16)
    root.update(b"".join(t.to_bytes(8, "little") for t in a))
    assert block_keys(a, BS) == [root.digest()]  # stable: no per-process salt


def test_a_prompt_with_a_computed_prefix_shares_its_blocks():
    bm = cached(10)
    prompt = list(range(10))  # two full blocks and a partial one
    first = computed(bm, 1, prompt, 3)
    second = bm.allocate_with_prefix(2, 4, prompt + [99])
    assert second.cached_blocks == 2 and second.table[:2] == first[:2]
    assert set(second.table[2:]).isdisjoint(first)
    assert bm.num_held == 5 and bm.num_free == 5
    stats = bm.cache_stats()
    assert (stats.cached_blocks, stats.hit_blocks, stats.queried_blocks) == (2, 2, 2 + 2)
    assert bm.check_invariants() == []


def test_the_block_holding_the_last_prompt_token_is_never_a_hit():
    bm = cached(6)
    prompt = list(range(8))  # exactly two blocks: the second holds the last token
    computed(bm, 1, prompt, 2)
    assert bm.cache_stats().cached_blocks == 2
    assert bm.allocate_with_prefix(2, 2, prompt).cached_blocks == 1


def test_a_block_never_marked_computed_is_never_cached():
    bm = cached(6)
    bm.allocate_with_prefix(1, 3, list(range(12)))
    bm.mark_computed(1, 6)  # one full block computed, the second half-way
    bm.release(1)
    assert (bm.num_evictable, bm.num_free) == (1, 5)
    assert bm.allocate_with_prefix(2, 3, list(range(12))).cached_blocks == 1


def test_chunk_by_chunk_each_block_is_cached_once_full_and_never_uncached():
    bm = cached(6)
    prompt = list(range(13))
    bm.allocate_with_prefix(1, 4, prompt)
    for done, cached_blocks in ((3, 0), (5, 1), (8, 2), (6, 2), (13, 3)):  # (6, 2): a smaller count changes nothing
        bm.mark_computed(1, done)
        assert bm.cache_stats().cached_blocks == cached_blocks
    assert bm.allocate_with_prefix(2, 4, prompt).cached_blocks == 3


def test_released_cached_blocks_stay_and_count_as_room_for_admission():
    bm = cached(4)
    computed(bm, 1, list(range(9)), 3)
    bm.release(1)
    assert (bm.num_free, bm.num_evictable, bm.num_held) == (2, 2, 0)
    assert bm.can_allocate(4)
    table = bm.allocate(2, 4)  # needs both cached blocks: evicts them
    assert sorted(table) == [0, 1, 2, 3]
    stats = bm.cache_stats()
    assert (stats.evictions, stats.cached_blocks, stats.evictable_blocks) == (2, 0, 0)
    assert bm.check_invariants() == []


def test_eviction_takes_the_least_recently_released_and_a_chain_loses_its_tail_first():
    bm = cached(6)
    a, b = [1] * 9, [2] * 9
    table_a = computed(bm, 1, a, 3)
    table_b = computed(bm, 2, b, 3)
    bm.release(1)
    bm.release(2)
    assert bm.allocate(3, 3) == [table_a[2], table_b[2], table_a[1]]  # two free, then a's tail
    assert bm.allocate_with_prefix(4, 3, a).cached_blocks == 1  # a's head survived ...
    assert bm.cache_stats().evictions == 3  # ... and b's two blocks made room for the rest


def test_a_hit_takes_its_block_out_of_the_evictable_set():
    bm = cached(4)
    computed(bm, 1, [1] * 5, 2)
    computed(bm, 2, [2] * 5, 2)
    bm.release(1)
    bm.release(2)
    assert (bm.num_free, bm.num_evictable) == (2, 2)  # the partial blocks are free, the full ones cached
    hit = bm.allocate_with_prefix(3, 2, [1] * 5)
    assert hit.cached_blocks == 1 and bm.num_evictable == 1
    assert bm.can_allocate(2) and not bm.can_allocate(3)
    bm.allocate(4, 2)  # the last free block, then b's cached one: never the owned hit
    assert bm.cache_stats().evictions == 1 and bm.check_invariants() == []


def test_release_refreshes_a_cached_block_in_the_lru_order():
    bm = cached(4)
    a, b = [1] * 5, [2] * 5
    table_a = computed(bm, 1, a, 2)
    computed(bm, 2, b, 2)
    bm.release(1)
    bm.release(2)  # LRU: a's block, then b's
    bm.allocate_with_prefix(3, 2, a)  # a hit on a's block
    bm.release(3)  # LRU now: b's, then a's
    bm.allocate(4, 3)  # two free blocks, then one eviction: b's
    bm.release(4)
    assert bm.allocate_with_prefix(5, 2, a).table[0] == table_a[0]
    assert bm.cache_stats().evictions == 1 and bm.check_invariants() == []


def test_owned_hits_lower_what_admission_needs_and_owned_blocks_are_never_evicted():
    bm = cached(5)
    prompt = list(range(13))  # three full blocks: all three shareable
    computed(bm, 1, prompt, 4)
    assert not bm.can_allocate(4)  # one free block
    assert bm.can_allocate(4, prompt)  # three of them shared with sequence 1
    assert bm.allocate_with_prefix(2, 4, prompt).cached_blocks == 3
    with pytest.raises(BlockAccountingError):
        bm.allocate(3, 1)  # nothing free, nothing evictable: the owned cached blocks stay
    assert bm.cache_stats().evictions == 0


def test_a_block_computed_twice_concurrently_keeps_the_first_copy_cached():
    bm = cached(6)
    prompt = list(range(9))
    table_a = bm.allocate_with_prefix(1, 3, prompt).table
    table_b = bm.allocate_with_prefix(2, 3, prompt).table  # both miss: nothing computed yet
    bm.mark_computed(1, 9)
    bm.mark_computed(2, 9)
    assert bm.cache_stats().cached_blocks == 2
    bm.release(2)
    assert bm.num_free == 3 and set(bm._free) == set(table_b)  # b's copies are not cached
    bm.release(1)
    assert (bm.num_free, bm.num_evictable) == (4, 2)
    assert bm.allocate_with_prefix(3, 3, prompt).table[:2] == table_a[:2]
    assert bm.check_invariants() == []


def test_evict_all_makes_the_pool_whole_and_the_ledger_balances():
    bm = cached(8)
    prompt = list(range(9))
    computed(bm, 1, prompt, 3)
    computed(bm, 2, prompt, 3)
    shared = bm._tables[1][0]
    assert bm.ledger.block_acquisitions[shared] == 2
    bm.release(1)
    bm.release(2)
    assert bm.evict_all() == 2 and bm.evict_all() == 0
    assert bm.num_free == 8 and bm.check_invariants() == [] and bm.ledger.problems() == []
    assert bm.ledger.block_releases[shared] == 2


def test_the_ledger_names_a_shared_block_released_once_for_two_owners():
    bm = cached(8)
    prompt = list(range(9))
    computed(bm, 1, prompt, 3)
    computed(bm, 2, prompt, 3)
    shared = bm._tables[1][0]
    bm.release(1)
    bm.release(2)
    bm.ledger.block_releases[shared] -= 1  # as if one owner's release of it had not been counted
    assert bm.ledger.problems() == [f"block {shared}: acquired 2x, released 1x"]


# ---- wrong moves ----

def test_a_sequence_released_twice_or_never_allocated_raises():
    bm = cached(4)
    computed(bm, 1, list(range(9)), 3)
    bm.release(1)
    with pytest.raises(DoubleRelease):
        bm.release(1)
    with pytest.raises(BlockAccountingError):
        bm.release(2)
    with pytest.raises(BlockAccountingError):
        bm.mark_computed(1, 9)


def test_a_refcount_below_zero_or_a_block_freed_twice_raises():
    bm = cached(4)
    computed(bm, 1, list(range(9)), 3)
    evictable = bm._tables[1][0]
    bm.release(1)
    with pytest.raises(BlockAccountingError, match="below zero"):
        bm._free_block(evictable)  # cached, no owner
    with pytest.raises(BlockAccountingError, match="below zero"):
        bm._free_block(bm._free[0])
    bm.evict_all()
    with pytest.raises(BlockAccountingError):
        bm._evict(evictable)  # already evicted


def test_evicting_a_block_still_referenced_raises():
    bm = cached(4)
    table = computed(bm, 1, list(range(9)), 3)
    bm.prefix.evictable[table[0]] = None  # corrupt: an owned block listed as evictable
    assert any("evictable blocks with an owner" in p for p in bm.check_invariants())
    with pytest.raises(BlockAccountingError, match="still referenced"):
        bm.evict_all()


def test_a_key_that_maps_to_a_free_block_raises():
    bm = cached(4)
    prompt = list(range(9))
    bm.prefix.register(bm._free[0], block_keys(prompt, BS)[0])  # corrupt: a free block indexed
    assert any("cached blocks on the free list" in p for p in bm.check_invariants())
    with pytest.raises(BlockAccountingError, match="which is free"):
        bm.allocate_with_prefix(1, 3, prompt)
    assert not bm.holds(1)


def test_an_evicted_block_left_in_a_table_is_named_by_the_invariants():
    bm = cached(4)
    table = computed(bm, 1, list(range(9)), 3)
    bm._refcount[table[0]] = 0  # corrupt: as if its owner's reference were lost ...
    bm.prefix.park(table[0])
    bm.evict_all()  # ... so it is evicted while still in sequence 1's table
    problems = bm.check_invariants()
    assert any("both free and held" in p for p in problems)


def test_prefix_caching_needs_a_block_size_and_a_table_that_holds_the_prompt():
    with pytest.raises(ValueError):
        BlockManager(4, prefix_caching=True)
    bm = cached(4)
    with pytest.raises(ValueError):
        bm.allocate_with_prefix(1, 2, list(range(12)))
    bm.allocate_with_prefix(1, 3, list(range(12)))
    with pytest.raises(ValueError):
        bm.mark_computed(1, -1)


# ---- off ----

def test_with_prefix_caching_off_nothing_is_shared_or_kept():
    bm = BlockManager(6)
    prompt = list(range(9))
    first = bm.allocate_with_prefix(1, 3, prompt)
    bm.mark_computed(1, 9)
    second = bm.allocate_with_prefix(2, 3, prompt)
    assert (first.cached_blocks, second.cached_blocks) == (0, 0)
    assert set(first.table).isdisjoint(second.table)
    bm.release(1)
    bm.release(2)
    assert bm.num_free == 6 and bm.num_evictable == 0 and bm.evict_all() == 0
    assert bm.cache_stats() == type(bm.cache_stats())(0, 0, 0, 0, 0)
    assert bm.check_invariants() == [] and bm.ledger.problems() == []
