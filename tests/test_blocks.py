import pytest

from streamlab.engine.blocks import BlockManager
from streamlab.errors import BlockAccountingError, DoubleRelease


def test_allocate_and_release_returns_every_block():
    bm = BlockManager(10)
    table = bm.allocate(seq_id=1, num_blocks=4)
    assert len(table) == 4 and bm.num_free == 6
    assert bm.release(1) == 4
    assert bm.num_free == 10 and bm.check_invariants() == []
    assert bm.ledger.problems() == []


def test_second_release_raises_and_is_counted():
    bm = BlockManager(4)
    bm.allocate(1, 2)
    bm.release(1)
    with pytest.raises(DoubleRelease):
        bm.release(1)
    assert bm.ledger.double_release_attempts == 1
    assert bm.num_free == 4
    assert "double-release" in " ".join(bm.ledger.problems())


def test_release_of_a_sequence_never_allocated_raises():
    bm = BlockManager(4)
    with pytest.raises(BlockAccountingError):
        bm.release(99)


def test_freeing_an_unknown_block_or_below_zero_raises():
    bm = BlockManager(4)
    with pytest.raises(BlockAccountingError):
        bm._free_block(17)
    with pytest.raises(BlockAccountingError):
        bm._free_block(0)  # free already: refcount would go below zero


def test_cannot_allocate_more_than_free_or_twice():
    bm = BlockManager(4)
    assert not bm.can_allocate(5)
    with pytest.raises(BlockAccountingError):
        bm.allocate(1, 5)
    bm.allocate(1, 2)
    with pytest.raises(BlockAccountingError):
        bm.allocate(1, 1)


def test_invariant_check_notices_a_corrupted_pool():
    bm = BlockManager(6)
    bm.allocate(1, 3)
    bm._free.append(bm._tables[1][0])  # a held block also on the free list
    problems = bm.check_invariants()
    assert any("both free and held" in p for p in problems)


def test_ledger_reports_a_sequence_never_released():
    bm = BlockManager(6)
    bm.allocate(1, 3)
    assert bm.ledger.problems() == ["sequence 1: allocated 1x, released 0x"]
