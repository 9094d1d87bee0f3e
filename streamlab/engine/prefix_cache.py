"""The prefix cache's index: which block holds which prompt block's content, which cached blocks
have no owner (evictable, least recently used first), and how far each live sequence's prompt is
computed (only computed blocks are indexed).

Owned by the BlockManager (blocks.py), which alone decides when a block enters or leaves the
index; reference counts stay there. A block's key is a hash chain over the prompt, as in vLLM's
automatic prefix caching: key(i) = H(key(i-1), token ids of block i), so two equal keys mean the
same tokens at the same positions after the same prefix. blake2b, not hash(): the same key in
every process and every run.
"""

from __future__ import annotations

import hashlib
import struct
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from streamlab.errors import BlockAccountingError

KEY_BYTES = 16  # 128 bits: a collision would silently share the wrong KV, so not 64


def block_keys(prompt_ids: Sequence[int], block_size: int) -> list[bytes]:
    """The key of every full block of a prompt, in order; a partial last block has none."""
    keys: list[bytes] = []
    parent = b""  # the first block's parent: fixed-length keys after it, so no ambiguity
    for start in range(0, len(prompt_ids) - block_size + 1, block_size):
        digest = hashlib.blake2b(parent, digest_size=KEY_BYTES)
        digest.update(struct.pack(f"<{block_size}q", *prompt_ids[start:start + block_size]))
        parent = digest.digest()
        keys.append(parent)
    return keys


def shareable_blocks(prompt_len: int, block_size: int) -> int:
    """How many leading prompt blocks may come from the cache: never the one holding the prompt's
    last token, whose logits make the first new token, so at least one token is always computed."""
    return max(0, (prompt_len - 1) // block_size)


@dataclass(frozen=True)
class CacheStats:
    cached_blocks: int  # blocks whose content is indexed, owned or not
    evictable_blocks: int  # of those, owned by no sequence
    queried_blocks: int  # prompt blocks looked up at allocation (each could have been a hit)
    hit_blocks: int  # of those, found cached and shared
    evictions: int  # cached blocks returned to the free list to make room (or by evict_all)


class PrefixIndex:
    """Key <-> block, both ways; the unowned cached blocks in LRU order; and per live sequence, the
    keys of its full prompt blocks and how many of them are computed. Strict: registering a block
    twice, or claiming, parking or forgetting a block in the wrong state, raises."""

    def __init__(self, block_size: int) -> None:
        self.block_size = block_size
        self.block_of: dict[bytes, int] = {}
        self.key_of: dict[int, bytes] = {}
        self.evictable: OrderedDict[int, None] = OrderedDict()  # least recently used first
        self.keys_of_seq: dict[int, list[bytes]] = {}  # per live sequence: its full prompt blocks' keys
        self.computed: dict[int, int] = {}  # per live sequence: leading prompt blocks holding computed KV
        self.queried_blocks = 0
        self.hit_blocks = 0
        self.evictions = 0

    def prompt_keys(self, prompt_ids: Sequence[int], num_blocks: int) -> list[bytes]:
        if len(prompt_ids) > num_blocks * self.block_size:
            raise ValueError(f"{num_blocks} blocks cannot hold a prompt of {len(prompt_ids)} tokens")
        return block_keys(prompt_ids, self.block_size)

    def shareable_keys(self, prompt_ids: Sequence[int], keys: list[bytes]) -> list[bytes]:
        return keys[:shareable_blocks(len(prompt_ids), self.block_size)]

    def cached_prefix(self, keys: list[bytes], refcount: list[int]) -> list[int]:
        """The blocks holding the longest run of `keys` that is cached, from the first."""
        blocks = []
        for i, key in enumerate(keys):
            block = self.block_of.get(key)
            if block is None:
                break
            if refcount[block] == 0 and block not in self.evictable:
                raise BlockAccountingError(f"prompt block {i}'s key maps to block {block}, which is free")
            blocks.append(block)
        return blocks

    def track(self, seq_id: int, keys: list[bytes], cached_blocks: int) -> None:
        self.keys_of_seq[seq_id] = keys
        self.computed[seq_id] = cached_blocks  # hits hold computed KV already

    def untrack(self, seq_id: int) -> None:
        self.keys_of_seq.pop(seq_id, None)
        self.computed.pop(seq_id, None)

    def mark_computed(self, seq_id: int, table: list[int], num_tokens: int) -> None:
        """Index the full prompt blocks among the first `num_tokens` tokens not indexed yet."""
        keys = self.keys_of_seq[seq_id]
        upto_blocks = min(num_tokens // self.block_size, len(keys))
        for i in range(self.computed[seq_id], upto_blocks):
            if keys[i] not in self.block_of:
                self.register(table[i], keys[i])
            # else another sequence computed the same block first: that copy stays the cached one,
            # and this one goes back to the free list on release.
        self.computed[seq_id] = max(self.computed[seq_id], upto_blocks)

    def is_cached(self, block: int) -> bool:
        return block in self.key_of

    def register(self, block: int, key: bytes) -> None:
        if block in self.key_of:
            raise BlockAccountingError(f"block {block} is already cached under another key")
        if key in self.block_of:
            raise BlockAccountingError(f"key already cached in block {self.block_of[key]}, not {block}")
        self.block_of[key] = block
        self.key_of[block] = key

    def forget(self, block: int) -> None:
        if block not in self.key_of:
            raise BlockAccountingError(f"block {block} is not cached")
        del self.block_of[self.key_of.pop(block)]

    def park(self, block: int) -> None:
        """Its last owner released it: keep it, most recently used."""
        if block in self.evictable or block not in self.key_of:
            raise BlockAccountingError(f"block {block} cannot become evictable (cached: "
                                       f"{block in self.key_of}, evictable: {block in self.evictable})")
        self.evictable[block] = None

    def claim(self, block: int) -> None:
        """It has an owner again (a hit), or is being evicted: no longer evictable."""
        if block not in self.evictable:
            raise BlockAccountingError(f"block {block} is not evictable")
        del self.evictable[block]

    def least_recently_used(self) -> int | None:
        return next(iter(self.evictable), None)

    def stats(self) -> CacheStats:
        return CacheStats(len(self.key_of), len(self.evictable), self.queried_blocks, self.hit_blocks,
                          self.evictions)

    def problems(self, refcount: list[int], free: set[int]) -> list[str]:
        """The index disagrees with itself or with the pool."""
        out = []
        if len(self.block_of) != len(self.key_of) or any(self.key_of.get(b) != k for k, b in self.block_of.items()):
            out.append("the key -> block and block -> key maps disagree")
        if cached_free := sorted(free & self.key_of.keys()):
            out.append(f"cached blocks on the free list: {cached_free[:8]}")
        if uncached := sorted(b for b in self.evictable if b not in self.key_of):
            out.append(f"evictable blocks that are not cached: {uncached[:8]}")
        if owned := sorted(b for b in self.evictable if refcount[b] != 0):
            out.append(f"evictable blocks with an owner: {owned[:8]}")
        if lost := sorted(b for b in self.key_of if refcount[b] == 0 and b not in self.evictable):
            out.append(f"cached blocks with no owner that are not evictable: {lost[:8]}")
        return out
