import pytest

from streamlab.engine.blocks import BlockManager
from streamlab.errors import BlockAccountingError, DoubleRelease

# Times nothing (read for it): may run beside another such item under xdist (harness/cores_lock.py).
pytestmark = pytest.mark.shares_cores


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


def test_the_ledger_keeps_a_bounded_window_of_released_entries_and_the_aggregates():
    bm = BlockManager(8, ledger_window=3)
    bm.allocate(100, 2)  # still held: always kept, whatever the window
    for seq in range(10):
        bm.allocate(seq, 1)
        bm.release(seq)
    assert set(bm.ledger.entries) == {100, 7, 8, 9}  # the live one and the last three released
    assert (bm.ledger.allocations, bm.ledger.releases, bm.ledger.forgotten) == (11, 10, 7)
    with pytest.raises(DoubleRelease):
        bm.release(9)  # inside the window: known as a double release
    with pytest.raises(BlockAccountingError):
        bm.release(0)  # past the window: still refused, as an unknown sequence
    bm.release(100)
    assert bm.check_invariants() == []


def test_a_bad_entry_leaving_the_window_is_still_counted():
    bm = BlockManager(4, ledger_window=1)
    bm.allocate(1, 1)
    bm.release(1)
    with pytest.raises(DoubleRelease):
        bm.release(1)
    bm.ledger.entries[1].releases = 2  # as if a bug had released it twice: the entry is bad
    bm.allocate(2, 1)
    bm.release(2)  # pushes entry 1 out of the window
    assert 1 not in bm.ledger.entries
    assert "1 older sequence(s) not allocated and released exactly once" in bm.ledger.problems()
