"""BlockManager: the sole owner of which cache blocks are free and who holds the rest.

Strict by design: freeing an unknown block, a refcount going below zero, or releasing a
sequence twice raises. A ledger counts allocations and releases per sequence, and acquisitions
and releases per block, so that "every sequence released exactly once, every acquisition of a
shared block released once, and the pool is whole" can be asserted afterwards.
No torch here: blocks are ids, the tensors live in cache.py.

With prefix caching on (off by default), every block is exactly one of: free; owned (refcount
> 0, in that many block tables); cached with no owner (evictable). Full prompt blocks whose KV
the caller says is computed are indexed by content (prefix_cache.py) and shared with later
sequences whose prompts start the same way; when their last owner releases them they stay
cached until admission needs the room and evicts them, least recently used first.
"""

from __future__ import annotations

from collections import Counter, OrderedDict, deque
from collections.abc import Sequence
from dataclasses import dataclass

from streamlab.engine.prefix_cache import CacheStats, PrefixIndex
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
    that was not allocated and released exactly once is counted there, not forgotten. Per block,
    acquisitions and releases for life: a block shared by n sequences is acquired n times, and
    once idle each must have been released as often as it was acquired."""

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
        # Per block, for life (bounded by the pool): a block shared by n owners is acquired n times.
        self.block_acquisitions: Counter[int] = Counter()
        self.block_releases: Counter[int] = Counter()

    def entry(self, seq_id: int) -> LedgerEntry:
        return self.entries.setdefault(seq_id, LedgerEntry())

    def record_allocation(self, seq_id: int, table: list[int]) -> None:
        entry = self.entry(seq_id)
        entry.allocations += 1
        entry.blocks = len(table)
        self.allocations += 1
        self.blocks_allocated += len(table)
        self.block_acquisitions.update(table)

    def record_release(self, seq_id: int, table: list[int]) -> None:
        entry = self.entry(seq_id)
        entry.releases += 1
        self.releases += 1
        self.blocks_released += len(table)
        self.block_releases.update(table)
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
        if not any(e.releases == 0 for e in self.entries.values()):  # idle: every acquisition released
            unbalanced = [b for b in sorted(self.block_acquisitions.keys() | self.block_releases.keys())
                          if self.block_acquisitions[b] != self.block_releases[b]]
            out += [f"block {b}: acquired {self.block_acquisitions[b]}x, released {self.block_releases[b]}x"
                    for b in unbalanced[:8]]
            if len(unbalanced) > 8:
                out.append(f"{len(unbalanced) - 8} more block(s) not released once per acquisition")
        return out


@dataclass(frozen=True)
class Allocation:
    table: list[int]
    cached_blocks: int  # the table's first `cached_blocks` entries hold KV computed earlier: skip them


class BlockManager:
    def __init__(self, num_blocks: int, ledger_window: int = LEDGER_WINDOW, prefix_caching: bool = False,
                 block_size: int | None = None) -> None:
        if prefix_caching and not block_size:
            raise ValueError("prefix caching keys blocks by their tokens: it needs the block size")
        self.num_blocks = num_blocks
        self._free: deque[int] = deque(range(num_blocks))
        self._refcount = [0] * num_blocks
        self._tables: dict[int, list[int]] = {}
        self.ledger = Ledger(ledger_window)
        self.prefix = PrefixIndex(block_size) if prefix_caching and block_size else None
        self.defect = ""  # lab only: a seeded defect (streamlab/defects.py), "" in every real run

    @property
    def prefix_caching(self) -> bool:
        return self.prefix is not None

    @property
    def num_free(self) -> int:
        """On the free list (cached blocks with no owner are not: see num_evictable)."""
        return len(self._free)

    @property
    def num_evictable(self) -> int:
        return len(self.prefix.evictable) if self.prefix else 0

    @property
    def num_held(self) -> int:
        """Owned by at least one sequence."""
        return self.num_blocks - len(self._free) - self.num_evictable

    def holds(self, seq_id: int) -> bool:
        return seq_id in self._tables

    def holders(self) -> set[int]:
        return set(self._tables)

    def cache_stats(self) -> CacheStats:
        return self.prefix.stats() if self.prefix else CacheStats(0, 0, 0, 0, 0)

    def can_allocate(self, num_blocks: int, prompt_ids: Sequence[int] | None = None, share_multiple: int = 1) -> bool:
        """Whether allocate (or allocate_with_prefix, given the prompt) would succeed now."""
        if prompt_ids is None or not self.prefix:
            return self._fits(num_blocks)
        shareable = self.prefix.shareable_keys(prompt_ids, self.prefix.prompt_keys(prompt_ids, num_blocks))
        hits = self.prefix.cached_prefix(shareable, self._refcount)
        return self._fits(num_blocks - self._owned(hits[:len(hits) - len(hits) % share_multiple]))

    def _fits(self, new_blocks: int) -> bool:
        # An evictable hit counts once as room and once as need, so only owned hits lower the need.
        available = len(self._free) + self.num_evictable
        if self.defect == "last_free_block":  # lab only (streamlab/defects.py): the classic off-by-one
            return new_blocks < available
        return new_blocks <= available

    def allocate(self, seq_id: int, num_blocks: int) -> list[int]:
        return self.allocate_with_prefix(seq_id, num_blocks, ()).table

    def allocate_with_prefix(self, seq_id: int, num_blocks: int, prompt_ids: Sequence[int],
                             share_multiple: int = 1) -> Allocation:
        """A table whose first `cached_blocks` blocks are shared cached prompt blocks (always 0 with
        prefix caching off), a multiple of `share_multiple` (the engine's prefill chunk in blocks:
        a sequence computes from a chunk boundary, so what it computes is what it would have
        computed without the cache). The caller computes the prompt from cached_blocks * block_size
        on, and says how far it got with mark_computed."""
        if seq_id in self._tables:
            raise BlockAccountingError(f"sequence {seq_id} already holds blocks")
        keys, shareable, hits = [], [], []
        if self.prefix:
            keys = self.prefix.prompt_keys(prompt_ids, num_blocks)
            shareable = self.prefix.shareable_keys(prompt_ids, keys)
            hits = self.prefix.cached_prefix(shareable, self._refcount)
            hits = hits[:len(hits) - len(hits) % share_multiple]
        if not self._fits(num_blocks - self._owned(hits)):
            raise BlockAccountingError(f"asked for {num_blocks} blocks with {len(self._free)} free "
                                       f"and {self.num_evictable} evictable")
        for block in hits:  # claimed first, so making room for the rest cannot evict them
            if self._refcount[block] == 0:
                self.prefix.claim(block)
            self._refcount[block] += 1
        table = hits + [self._take_free_block() for _ in range(num_blocks - len(hits))]
        self._tables[seq_id] = table
        if self.prefix:
            self.prefix.track(seq_id, keys, len(hits))
            self.prefix.queried_blocks += len(shareable)
            self.prefix.hit_blocks += len(hits)
        self.ledger.record_allocation(seq_id, table)
        return Allocation(list(table), len(hits))

    def _owned(self, blocks: list[int]) -> int:
        return sum(1 for b in blocks if self._refcount[b] > 0)

    def _take_free_block(self) -> int:
        if not self._free:
            self._evict(self.prefix.least_recently_used() if self.prefix else None)
        block = self._free.popleft()
        self._refcount[block] += 1
        return block

    def mark_computed(self, seq_id: int, num_tokens: int) -> None:
        """The KV of the sequence's first `num_tokens` prompt tokens is written: its full prompt blocks
        among them become cached, shareable now and kept after release. Only this caches a block, so
        one never filled is never cached. A count at or below an earlier one changes nothing."""
        if seq_id not in self._tables:
            raise BlockAccountingError(f"sequence {seq_id} holds no blocks")
        if num_tokens < 0:
            raise ValueError(f"computed {num_tokens} tokens")
        if self.prefix:
            self.prefix.mark_computed(seq_id, self._tables[seq_id], num_tokens)

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
        if self.prefix:
            self.prefix.untrack(seq_id)
        # Cached blocks are parked tail first, so a prompt's first block is evicted last: evicting
        # a head would strand every later block of its chain, since a lookup stops at the first miss.
        for block in reversed(table) if self.prefix else table:
            self._free_block(block)
        self.ledger.record_release(seq_id, table)
        return len(table)

    def _free_block(self, block: int) -> None:
        if not 0 <= block < self.num_blocks:
            raise BlockAccountingError(f"unknown block {block}")
        if self._refcount[block] <= 0:
            raise BlockAccountingError(f"block {block} refcount would go below zero")
        self._refcount[block] -= 1
        if self._refcount[block] == 0:
            if self.prefix and self.prefix.is_cached(block):
                self.prefix.park(block)
            else:
                self._free.append(block)

    def _evict(self, block: int | None) -> None:
        """A cached block with no owner goes back to the free list, its content forgotten."""
        if self.prefix is None or block is None:
            raise BlockAccountingError("no free block and none evictable")
        if self._refcount[block] != 0:
            raise BlockAccountingError(f"evicting block {block}, still referenced {self._refcount[block]}x")
        self.prefix.claim(block)
        self.prefix.forget(block)
        self._free.append(block)
        self.prefix.evictions += 1

    def evict_all(self) -> int:
        """Every cached block with no owner back to the free list: with no sequence holding blocks,
        the pool is then whole. Returns how many were evicted."""
        count = 0
        while self.prefix and self.prefix.evictable:
            self._evict(self.prefix.least_recently_used())
            count += 1
        return count

    def check_invariants(self) -> list[str]:
        """Every block is exactly one of free, owned (refcount = its number of tables) or cached with
        no owner; they add up to the pool; the cache index agrees with the pool."""
        problems = []
        held = Counter(b for table in self._tables.values() for b in table)
        if any(len(set(table)) != len(table) for table in self._tables.values()):
            problems.append("a block appears twice in one block table")
        if not self.prefix and any(n > 1 for n in held.values()):
            problems.append("a block appears in two block tables")
        if len(set(self._free)) != len(self._free):
            problems.append("a block appears twice in the free list")
        free = set(self._free)
        evictable = set(self.prefix.evictable) if self.prefix else set()
        for name, overlap in (("free and held", held.keys() & free), ("evictable and held", held.keys() & evictable),
                              ("free and evictable", free & evictable)):
            if overlap:
                problems.append(f"blocks both {name}: {sorted(overlap)[:8]}")
        if len(self._free) + len(held) + len(evictable) != self.num_blocks:
            problems.append(f"free {len(self._free)} + held {len(held)} + evictable {len(evictable)} "
                            f"!= total {self.num_blocks}")
        for block, count in enumerate(self._refcount):
            if count != held[block]:
                problems.append(f"block {block} refcount {count}, expected {held[block]}")
                break
        if self.prefix:
            problems += self.prefix.problems(self._refcount, free)
        return problems
