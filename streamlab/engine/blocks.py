"""BlockManager: the sole owner of which cache blocks are free and who holds the rest.

Strict by design: freeing an unknown block, a refcount going below zero, or releasing a
sequence twice raises. A ledger counts allocations and releases per sequence so that
"every sequence released exactly once and the pool is whole" can be asserted afterwards.
No torch here: blocks are ids, the tensors live in cache.py.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass

from streamlab.errors import BlockAccountingError, DoubleRelease


@dataclass
class LedgerEntry:
    blocks: int = 0
    allocations: int = 0
    releases: int = 0
    double_release_attempts: int = 0


LEDGER_WINDOW = 10_000  # released sequences whose own entries are kept (the checks read the recent ones)


class Ledger:
    """Allocation and release counts: in aggregate for the life of the engine, per sequence for
    every sequence still holding blocks and for the last `window` released ones. A long-running
    server's ledger is bounded: an entry past the window is folded into the aggregates, and one
    that was not allocated and released exactly once is counted there, not forgotten."""

    def __init__(self, window: int = LEDGER_WINDOW) -> None:
        self.entries: OrderedDict[int, LedgerEntry] = OrderedDict()
        self.window = window
        self.settled = 0  # released entries currently kept (oldest first in `entries` order of release)
        self.forgotten = 0  # entries folded into the aggregates
        self.forgotten_problems = 0  # of those, how many were not allocated and released exactly once
        self.double_release_attempts = 0
        self.allocations = 0
        self.releases = 0
        self.blocks_allocated = 0
        self.blocks_released = 0

    def entry(self, seq_id: int) -> LedgerEntry:
        return self.entries.setdefault(seq_id, LedgerEntry())

    def record_allocation(self, seq_id: int, num_blocks: int) -> None:
        entry = self.entry(seq_id)
        entry.allocations += 1
        entry.blocks = num_blocks
        self.allocations += 1
        self.blocks_allocated += num_blocks

    def record_release(self, seq_id: int, num_blocks: int) -> None:
        entry = self.entry(seq_id)
        entry.releases += 1
        self.releases += 1
        self.blocks_released += num_blocks
        if entry.releases == 1:
            self.entries.move_to_end(seq_id)  # released entries queue up in release order
            self.settled += 1
            self._forget_beyond_window()

    def _forget_beyond_window(self) -> None:
        while self.settled > self.window:
            seq_id, e = next((k, v) for k, v in self.entries.items() if v.releases)
            del self.entries[seq_id]
            self.settled -= 1
            self.forgotten += 1
            if e.allocations != 1 or e.releases != 1:
                self.forgotten_problems += 1

    def problems(self) -> list[str]:
        """Sequences not allocated-and-released exactly once (only meaningful when idle)."""
        out = []
        for seq_id, e in self.entries.items():
            if e.allocations != 1 or e.releases != 1:
                out.append(f"sequence {seq_id}: allocated {e.allocations}x, released {e.releases}x")
        if self.forgotten_problems:
            out.append(f"{self.forgotten_problems} older sequence(s) not allocated and released exactly once")
        if self.double_release_attempts:
            out.append(f"{self.double_release_attempts} double-release attempt(s)")
        return out


class BlockManager:
    def __init__(self, num_blocks: int, ledger_window: int = LEDGER_WINDOW) -> None:
        self.num_blocks = num_blocks
        self._free: deque[int] = deque(range(num_blocks))
        self._refcount = [0] * num_blocks
        self._tables: dict[int, list[int]] = {}
        self.ledger = Ledger(ledger_window)
        self.defect = ""  # lab only: a seeded defect (streamlab/defects.py), "" in every real run

    @property
    def num_free(self) -> int:
        return len(self._free)

    @property
    def num_held(self) -> int:
        return self.num_blocks - len(self._free)

    def holds(self, seq_id: int) -> bool:
        return seq_id in self._tables

    def holders(self) -> set[int]:
        return set(self._tables)

    def can_allocate(self, num_blocks: int) -> bool:
        if self.defect == "last_free_block":  # lab only (streamlab/defects.py): the classic off-by-one
            return num_blocks < len(self._free)
        return num_blocks <= len(self._free)

    def allocate(self, seq_id: int, num_blocks: int) -> list[int]:
        if seq_id in self._tables:
            raise BlockAccountingError(f"sequence {seq_id} already holds blocks")
        if not self.can_allocate(num_blocks):
            raise BlockAccountingError(f"asked for {num_blocks} blocks with {len(self._free)} free")
        table = [self._free.popleft() for _ in range(num_blocks)]
        for block in table:
            self._refcount[block] += 1
        self._tables[seq_id] = table
        self.ledger.record_allocation(seq_id, num_blocks)
        return list(table)

    def release(self, seq_id: int) -> int:
        """Return a sequence's blocks to the pool. The only way blocks come back."""
        entry = self.ledger.entries.get(seq_id)
        if seq_id not in self._tables:
            if entry is not None and entry.releases:
                entry.double_release_attempts += 1
                self.ledger.double_release_attempts += 1
                raise DoubleRelease(f"sequence {seq_id} was already released")
            raise BlockAccountingError(f"sequence {seq_id} holds no blocks")
        table = self._tables.pop(seq_id)
        for block in table:
            self._free_block(block)
        self.ledger.record_release(seq_id, len(table))
        return len(table)

    def _free_block(self, block: int) -> None:
        if not 0 <= block < self.num_blocks:
            raise BlockAccountingError(f"unknown block {block}")
        if self._refcount[block] <= 0:
            raise BlockAccountingError(f"block {block} refcount would go below zero")
        self._refcount[block] -= 1
        if self._refcount[block] == 0:
            self._free.append(block)

    def check_invariants(self) -> list[str]:
        """Free + held by live sequences == total, and no block in two tables or both free and held."""
        problems = []
        held = [b for table in self._tables.values() for b in table]
        if len(set(held)) != len(held):
            problems.append("a block appears in two block tables")
        if len(set(self._free)) != len(self._free):
            problems.append("a block appears twice in the free list")
        free = set(self._free)
        overlap = set(held) & free
        if overlap:
            problems.append(f"blocks both free and held: {sorted(overlap)[:8]}")
        if len(self._free) + len(held) != self.num_blocks:
            problems.append(f"free {len(self._free)} + held {len(held)} != total {self.num_blocks}")
        for block, count in enumerate(self._refcount):
            expected = 0 if block in free else 1
            if count != expected:
                problems.append(f"block {block} refcount {count}, expected {expected}")
                break
        return problems
