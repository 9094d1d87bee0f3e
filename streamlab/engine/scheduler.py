"""Queues and admission: schedule() -> ScheduledBatch, postprocess, finish. No tensors.

Admission is in arrival order: the head of the waiting queue is admitted when there is a
batch slot and the BlockManager can reserve every block it can ever need (prompt plus
max_new_tokens); if it cannot, nobody behind it jumps the queue.
`finish()` is the one place a sequence's blocks go back.

With a step token budget (chunked prefill) admission only reserves; a step then carries every
running stream's decode token first and fills the rest of the budget with prompt chunks of
admitted sequences, oldest first. A chunk is [k*C, min((k+1)*C, prompt)) for the chunk size C:
its boundaries depend on the sequence alone, never on the budget left or the neighbours.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from streamlab.config import EngineConfig
from streamlab.engine.blocks import BlockManager
from streamlab.engine.sequence import FinishReason, Sequence, SequenceStatus


@dataclass(frozen=True)
class PromptChunk:
    seq: Sequence
    start: int
    end: int

    @property
    def last(self) -> bool:  # completes the prompt: its last position's logits make the first token
        return self.end == len(self.seq.prompt_ids)


@dataclass(frozen=True)
class ScheduledBatch:
    prefills: list[Sequence]  # admitted in this step: their prefill makes their first token
    decodes: list[Sequence]  # running, not paused, admitted earlier: one token each
    chunks: list[PromptChunk] = field(default_factory=list)  # chunked prefill: run beside the decodes


class Scheduler:
    def __init__(self, config: EngineConfig, blocks: BlockManager) -> None:
        self.config = config
        self.blocks = blocks
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []

    @property
    def _chunk_blocks(self) -> int:
        """Cached prefixes are shared in whole prefill chunks (EngineConfig.prefix_caching)."""
        return max(1, self.config.prefill_chunk_tokens // self.config.cache.block_size)

    def add(self, seq: Sequence) -> None:
        self.waiting.append(seq)

    def blocks_needed(self, seq: Sequence) -> int:
        return self.config.cache.blocks_for(seq.max_tokens)

    def schedule(self, step: int) -> ScheduledBatch:
        admitted: list[Sequence] = []
        cap = self.config.max_prefills_per_step or self.config.max_batch
        while self.waiting and len(self.running) < self.config.max_batch and len(admitted) < cap:
            seq = self.waiting[0]
            need = self.blocks_needed(seq)
            if not self.blocks.can_allocate(need, seq.prompt_ids, self._chunk_blocks):
                break
            self.waiting.popleft()
            given = self.blocks.allocate_with_prefix(seq.seq_id, need, seq.prompt_ids, self._chunk_blocks)
            seq.block_table = given.table
            # A cached prefix is already in the cache: prefill starts after it, at a chunk boundary.
            seq.prefilled = seq.cached_tokens = given.cached_blocks * self.config.cache.block_size
            seq.status = SequenceStatus.RUNNING
            seq.admitted_step = step
            self.running.append(seq)
            admitted.append(seq)
        if self.config.step_token_budget:
            decodes = [s for s in self.running if not s.paused and s.prefill_done]
            return ScheduledBatch([], decodes, self._chunks(self.config.step_token_budget - len(decodes)))
        fresh = {id(s) for s in admitted}
        decodes = [s for s in self.running if not s.paused and id(s) not in fresh]
        return ScheduledBatch(admitted, decodes)

    def _chunks(self, budget: int) -> list[PromptChunk]:
        """Prompt chunks that fit in `budget` tokens, oldest sequence first; at least one whenever a
        prompt is unfinished, so prefill cannot starve behind a full batch of decodes."""
        size = self.config.prefill_chunk_tokens
        chunks: list[PromptChunk] = []
        for seq in self.running:
            if seq.paused or seq.prefill_done:
                continue
            start = seq.prefilled
            while start < len(seq.prompt_ids):
                end = min((start // size + 1) * size, len(seq.prompt_ids))
                if end - start > budget and chunks:
                    return chunks
                chunks.append(PromptChunk(seq, start, end))
                budget -= end - start
                start = end
        return chunks

    def postprocess(self, seq: Sequence, token_id: int, eos_token_id: int | None) -> FinishReason | None:
        """Record a new token; say whether it ends the sequence (the caller then calls finish)."""
        seq.output_ids.append(token_id)
        stop_hit = seq.stop_check is not None and seq.stop_check(token_id)
        if not seq.params.ignore_eos and eos_token_id is not None and token_id == eos_token_id:
            return FinishReason.EOS
        if stop_hit:
            return FinishReason.STOP
        if len(seq.output_ids) >= seq.params.max_new_tokens:
            return FinishReason.LENGTH
        return None

    def finish(self, seq: Sequence, reason: FinishReason, step: int) -> None:
        """End a sequence. The only place blocks are released; a second release raises."""
        if seq.status is SequenceStatus.WAITING:
            self.waiting.remove(seq)
        elif seq.status is SequenceStatus.RUNNING:
            self.running.remove(seq)
        seq.status = SequenceStatus.FINISHED
        seq.finish_reason = reason
        seq.finished_step = step
        if seq.admitted_step is not None:
            self.blocks.release(seq.seq_id)
