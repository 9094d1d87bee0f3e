"""What the engine hands the model in a step, built from its sequences and the paged cache:
prompt chunks, prefill passes and decode batches (tensors of token ids, positions, write slots,
block tables and masks). The engine's bookkeeping (who runs, what ends, what is released) is
streamlab/engine/engine.py's."""

from __future__ import annotations

import torch

from streamlab.engine.cache import KVCache
from streamlab.engine.scheduler import PromptChunk
from streamlab.engine.sequence import Sequence
from streamlab.engine.model import AttentionGroup, ChunkInput, DecodeBatch, TableAttention


def chunk_input(cache: KVCache, c: PromptChunk) -> ChunkInput:
    """One prompt chunk as the model takes it: its tokens, where their K/V go, its block table and causal mask."""
    bs = cache.config.block_size
    nb = -(-c.end // bs)
    query = torch.arange(c.start, c.end)
    return ChunkInput(torch.tensor(c.seq.prompt_ids[c.start:c.end]), c.start,
                      cache.slots_for(c.seq.block_table, c.start, c.end),
                      torch.tensor([c.seq.block_table[:nb]]),
                      torch.arange(nb * bs)[None, :] > query[:, None], c.last)



def prefill_passes(seqs: list[Sequence], pass_tokens: int) -> list[list[Sequence]]:
    """Admitted sequences in arrival order, cut into passes of at most prefill_pass_tokens
    prompt tokens (a longer prompt gets a pass of its own)."""
    passes: list[list[Sequence]] = []
    tokens = 0
    for seq in seqs:
        if passes and tokens + len(seq.prompt_ids) <= pass_tokens:
            passes[-1].append(seq)
            tokens += len(seq.prompt_ids)
        else:
            passes.append([seq])
            tokens = len(seq.prompt_ids)
    return passes



def decode_batch(cache: KVCache, seqs: list[Sequence], use_kernel: bool) -> DecodeBatch:
    """The decoding sequences as the model takes them: each last token, its position and write slot,
    and how attention reads its blocks (the kernel's block tables, or gather groups)."""
    bs = cache.config.block_size
    positions = [s.num_tokens - 1 for s in seqs]  # the last token is fed now
    write_slots = [s.block_table[p // bs] * bs + p % bs for s, p in zip(seqs, positions)]
    if use_kernel:  # one call for the whole batch, each sequence over its own context
        nb = max(p // bs + 1 for p in positions)
        return DecodeBatch(torch.tensor([s.last_token for s in seqs]), torch.tensor(positions),
                           torch.tensor(write_slots), [],
                           TableAttention(cache.padded_blocks([s.block_table for s in seqs], nb),
                                          torch.tensor([p + 1 for p in positions]), bs))
    # Group by block count: a sequence's attention length is its own context rounded up
    # to whole blocks, which depends on nothing else in the batch (see model.py).
    by_blocks: dict[int, list[int]] = {}
    for row, p in enumerate(positions):
        by_blocks.setdefault(p // bs + 1, []).append(row)
    groups = []
    for nb, rows in sorted(by_blocks.items()):
        blocks = cache.padded_blocks([seqs[r].block_table for r in rows], nb)
        context = torch.tensor([positions[r] + 1 for r in rows])
        masked = torch.arange(nb * bs)[None, :] >= context[:, None]
        groups.append(AttentionGroup(torch.tensor(rows), blocks, masked))
    return DecodeBatch(torch.tensor([s.last_token for s in seqs]), torch.tensor(positions),
                       torch.tensor(write_slots), groups)
