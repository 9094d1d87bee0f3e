"""KV tensors for every layer, stored and gathered by slot. Never picks blocks.

A slot is `block * block_size + offset`. One extra block past the pool, the pad block,
is never allocated and stays zero: gathers pad short block tables with it, so padded
positions hold finite values that the attention mask then zeroes out exactly.

Heads come first, (layer, head, slot, dim): a gather then hands attention each head's keys
as one contiguous (sequence, position, dim) block, the layout a batched matrix product and
scaled_dot_product_attention take without another copy.
"""

from __future__ import annotations

import torch

from streamlab.config import CacheConfig


class KVCache:
    def __init__(self, num_layers: int, num_heads: int, head_dim: int, config: CacheConfig,
                 dtype: torch.dtype = torch.float32) -> None:
        self.config = config
        self.pad_block = config.num_blocks
        shape = (num_layers, num_heads, (config.num_blocks + 1) * config.block_size, head_dim)
        self.k = torch.zeros(shape, dtype=dtype)
        self.v = torch.zeros(shape, dtype=dtype)

    @property
    def nbytes(self) -> int:
        return self.k.nbytes + self.v.nbytes

    def store(self, layer: int, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        # slots: (T,), k/v: (T, nh, hs)
        self.k[layer].index_copy_(1, slots, k.transpose(0, 1))
        self.v[layer].index_copy_(1, slots, v.transpose(0, 1))

    def gather(self, layer: int, blocks: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        # blocks: (G, nb) -> k, v: (nh, G, nb * block_size, hs), copied a whole block at a time
        nh, hs, bs = self.k.shape[1], self.k.shape[3], self.config.block_size
        G, nb = blocks.shape
        flat = blocks.reshape(-1)
        k = self.k[layer].view(nh, -1, bs, hs).index_select(1, flat).view(nh, G, nb * bs, hs)
        v = self.v[layer].view(nh, -1, bs, hs).index_select(1, flat).view(nh, G, nb * bs, hs)
        return k, v

    def slots_for(self, block_table: list[int], start: int, stop: int) -> torch.Tensor:
        """Slots of positions start..stop-1 of one sequence: (stop - start,)."""
        bs = self.config.block_size
        return torch.tensor([block_table[p // bs] * bs + p % bs for p in range(start, stop)], dtype=torch.long)

    def padded_blocks(self, block_tables: list[list[int]], num_blocks: int) -> torch.Tensor:
        """The first `num_blocks` blocks of each table, padded with the pad block: (G, num_blocks)."""
        rows = [t[:num_blocks] + [self.pad_block] * (num_blocks - len(t[:num_blocks])) for t in block_tables]
        return torch.tensor(rows, dtype=torch.long)
