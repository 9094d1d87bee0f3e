"""KV tensors for every layer, stored and gathered by slot. Never picks blocks.

A slot is `block * block_size + offset`. One extra block past the pool, the pad block,
is never allocated and stays zero: gathers pad short block tables with it, so padded
positions hold finite values that the attention mask then zeroes out exactly.
"""

from __future__ import annotations

import torch

from streamlab.config import CacheConfig


class KVCache:
    def __init__(self, num_layers: int, num_heads: int, head_dim: int, config: CacheConfig,
                 dtype: torch.dtype = torch.float32) -> None:
        self.config = config
        self.pad_block = config.num_blocks
        shape = (num_layers, (config.num_blocks + 1) * config.block_size, num_heads, head_dim)
        self.k = torch.zeros(shape, dtype=dtype)
        self.v = torch.zeros(shape, dtype=dtype)

    @property
    def nbytes(self) -> int:
        return self.k.nbytes + self.v.nbytes

    def store(self, layer: int, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        # slots: (T,), k/v: (T, nh, hs)
        self.k[layer].index_copy_(0, slots, k)
        self.v[layer].index_copy_(0, slots, v)

    def gather(self, layer: int, slots: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        # slots: (G, L) -> k, v: (G, L, nh, hs)
        return self.k[layer][slots], self.v[layer][slots]

    def slots_for(self, block_table: list[int], start: int, stop: int) -> torch.Tensor:
        """Slots of positions start..stop-1 of one sequence: (stop - start,)."""
        bs = self.config.block_size
        return torch.tensor([block_table[p // bs] * bs + p % bs for p in range(start, stop)], dtype=torch.long)

    def padded_slots(self, block_tables: list[list[int]], num_blocks: int) -> torch.Tensor:
        """Slots of the first `num_blocks` blocks of each table, padded with the pad block: (G, num_blocks * bs)."""
        bs = self.config.block_size
        rows = [t[:num_blocks] + [self.pad_block] * (num_blocks - len(t[:num_blocks])) for t in block_tables]
        blocks = torch.tensor(rows, dtype=torch.long)  # (G, nb)
        return (blocks[:, :, None] * bs + torch.arange(bs)).reshape(len(rows), num_blocks * bs)
