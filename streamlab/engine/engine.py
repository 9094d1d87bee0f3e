"""BatchEngine: add, cancel, pause, resume, stop, and step(). No clock, no asyncio, no I/O.

step() is one round: (1) apply the inbox; (2) admit waiting requests in order while there
are slots and blocks, prefilling each, which makes its first token; (3) decode one token for
every other running, unpaused sequence in one batched pass over the paged cache; (4) return
the events. With a step token budget (chunked prefill), (2) only admits, and (3) runs the
decodes and as many prompt chunks as fit in one pass; a prompt's last chunk makes its first token. Other threads only record wishes in the inbox, so nothing is removed while its
tensors are in use, and release happens at step boundaries in one place (Scheduler.finish).
"""

from __future__ import annotations

import itertools
import time
import threading
from collections.abc import Callable

import torch

from streamlab.config import EngineConfig
from streamlab.engine.blocks import BlockManager
from streamlab.engine.faults import FaultPlan, busy
from streamlab.engine.inspection import EngineInspection
from streamlab.engine.inputs import chunk_input, decode_batch, prefill_passes
from streamlab.engine.outputs import FinishEvent, StepOutput, TokenEvent
from streamlab.engine.scheduler import ScheduledBatch, Scheduler
from streamlab.engine.sequence import FinishReason, Sequence, SequenceStatus, StopCheck, Wish
from streamlab.errors import (DuplicateRequest, EngineBroken, InjectedFault, InvariantViolation, RequestError,
                              RequestTooLarge)
from streamlab.engine import paged_kernel
from streamlab.engine.model import GPT2
from streamlab.sampling import SamplingParams, make_rng, sample_rows


MAX_CONSECUTIVE_STEP_ERRORS = 3  # this many failed steps in a row: the engine is broken, not unlucky


class BatchEngine(EngineInspection):
    def __init__(self, model: GPT2, config: EngineConfig = EngineConfig(), fault: FaultPlan | None = None) -> None:
        dtype = getattr(torch, config.dtype)
        self.model = model if model.dtype == dtype else model.cast(dtype)
        self.config = config
        self.cache = self.model.new_cache(config.cache)
        self.blocks = BlockManager(config.cache.num_blocks, ledger_window=config.history,
                                   prefix_caching=config.prefix_caching, block_size=config.cache.block_size)
        self.scheduler = Scheduler(config, self.blocks)
        self._inbox: list[Wish] = []
        self._inbox_lock = threading.Lock()
        self._state_lock = threading.Lock()  # held for bookkeeping, never during a forward pass
        self._step_lock = threading.Lock()  # one step at a time
        self._seq_ids = itertools.count()
        self.fault, self._fault_rng = fault, fault.rng() if fault else None
        self.defect = fault.defect if fault else ""  # lab only: a seeded defect (streamlab/defects.py)
        self.blocks.defect = self.defect
        self._rng_by_seed: dict[int, torch.Generator] = {}  # only for the seeded defect shared_seed_rng
        self.step_errors = 0  # steps that failed and were contained
        self.last_step_error: str | None = None
        self._consecutive_errors = 0
        # The kernel is float32 only; another dtype takes the gather path.
        self.use_kernel = (config.decode_attention == "kernel" and config.dtype == "float32"
                           and paged_kernel.unavailable() is None)
        self._live: dict[str, Sequence] = {}  # submitted and not yet finished, inbox included
        self._steps = 0
        self._steps_started = 0
        self._tokens_generated = 0
        self._submitted = 0
        self._finished_by_reason: dict[str, int] = {r.value: 0 for r in FinishReason}
        # The state each cancelled sequence was in: the states a test must reach to test their release.
        self._cancelled_while: dict[str, int] = {"waiting": 0, "running": 0, "paused": 0}

    # ---- wishes: thread-safe, carried out by the next step ----

    def submit(self, request_id: str, prompt_ids: list[int], params: SamplingParams,
               stop_check: StopCheck | None = None) -> None:
        """Queue a request; refuse at once one that can never fit."""
        if not prompt_ids:
            raise RequestError("the prompt has no tokens")
        need_tokens = len(prompt_ids) + params.max_new_tokens
        limit = self.model.shape.n_positions
        if need_tokens > limit:
            raise RequestTooLarge(f"prompt ({len(prompt_ids)} tokens) plus max_new_tokens ({params.max_new_tokens}) "
                                  f"is {need_tokens}, over the model's context of {limit}")
        need_blocks = self.config.cache.blocks_for(need_tokens)
        if need_blocks > self.config.cache.num_blocks:
            raise RequestTooLarge(f"needs {need_blocks} cache blocks, the whole cache has {self.config.cache.num_blocks}")
        vocab = self.model.shape.vocab_size
        if not all(0 <= t < vocab for t in prompt_ids):
            raise RequestError(f"prompt token ids must be in [0, {vocab})")
        seq = Sequence(next(self._seq_ids), request_id, list(prompt_ids), params, stop_check, self._rng(params))
        with self._inbox_lock:
            if request_id in self._live:
                raise DuplicateRequest(f"request id {request_id!r} is already in the engine")
            self._live[request_id] = seq
            self._submitted += 1
            self._inbox.append(Wish("submit", request_id, seq))

    def _rng(self, params: SamplingParams) -> torch.Generator | None:
        """Each sampled request's own generator (or, under a seeded defect, one per seed)."""
        if self.defect == "shared_seed_rng" and params.seed is not None and not params.greedy:
            if params.seed not in self._rng_by_seed:
                self._rng_by_seed[params.seed] = make_rng(params)
            return self._rng_by_seed[params.seed]
        return make_rng(params)

    def cancel(self, request_id: str, closed_at: float | None = None) -> None:
        """End a request at the next step; harmless if it already ended or is cancelled twice.

        closed_at: when the caller's stream closed (its clock); the finish event carries it and the
        steps begun at that moment, for release-delay measurements. Kept on the sequence itself,
        so a close that comes after the sequence ended leaves nothing behind."""
        # The step count is read and the wish queued under one hold of the lock that the step takes
        # to count itself and drain the inbox: a step cannot begin between them, so the wish is
        # carried out by the step after the one recorded (a graded CI run read 2 steps here).
        with self._inbox_lock:
            seq = self._live.get(request_id)
            if closed_at is not None and seq is not None and seq.closed_at is None:
                seq.closed_at, seq.closed_after_step = closed_at, self._steps_started
            self._inbox.append(Wish("cancel", request_id))

    def stop(self, request_id: str) -> None:
        """End a request with reason `stop` at the next step (before it makes another token)."""
        self._wish("stop", request_id)

    def pause(self, request_id: str) -> None:
        """Leave the decode batch; blocks and slot are kept."""
        self._wish("pause", request_id)

    def resume(self, request_id: str) -> None:
        self._wish("resume", request_id)

    def _wish(self, kind: str, request_id: str) -> None:
        with self._inbox_lock:
            self._inbox.append(Wish(kind, request_id))

    # ---- the step ----

    def has_work(self) -> bool:
        """Whether step() would do anything: a wish to apply, a sequence to decode or one to admit.

        Paused sequences alone are no work, so a driver sleeps until a wish (a resume) arrives
        instead of spinning through empty steps.
        """
        with self._inbox_lock:
            if self._inbox:
                return True
        sched = self.scheduler
        if any(not s.paused for s in sched.running):
            return True
        return bool(sched.waiting) and len(sched.running) < self.config.max_batch and \
            self.blocks.can_allocate(sched.blocks_needed(sched.waiting[0]))

    def step(self, on_prefill: Callable[[StepOutput], None] | None = None) -> StepOutput:
        """One round. With on_prefill, admitted sequences' first tokens (and their finishes, if
        that token ends them) are handed over as soon as their prefill pass is done, as a
        StepOutput per pass, and are not repeated in the returned one."""
        if not self._step_lock.acquire(blocking=False):
            raise RuntimeError("step() called while another step is running")
        try:
            cpu0 = time.thread_time()
            out = self._step(on_prefill)
            if self.fault is not None and self.fault.step_slowdown > 1:
                busy((self.fault.step_slowdown - 1) * (time.thread_time() - cpu0))
            return out
        finally:
            self._step_lock.release()

    @property
    def steps_started(self) -> int:
        """Steps begun so far: a wish made now is carried out by step steps_started + 1."""
        return self._steps_started

    def _step(self, on_prefill: Callable[[StepOutput], None] | None) -> StepOutput:
        step = self._steps + 1
        finished: list[FinishEvent] = []
        with self._state_lock:
            self._apply_inbox(step, finished)
            batch = self.scheduler.schedule(step)
        try:
            self._maybe_inject_fault(step, batch)
            if self.config.step_token_budget:
                out = self._mixed_step(step, batch, finished)
            else:
                out = self._whole_prompt_step(step, batch, finished, on_prefill)
        except (EngineBroken, InvariantViolation):
            raise
        except Exception as exc:  # crash-only per step: its sequences end, their blocks go back once
            return self._fail_step(step, batch, finished, exc)
        self._consecutive_errors = 0
        return out

    def _maybe_inject_fault(self, step: int, batch: ScheduledBatch) -> None:
        if self.fault is None or not (batch.prefills or batch.decodes or batch.chunks):
            return
        if step == self.fault.at_step or (self.fault.rate and self._fault_rng.random() < self.fault.rate):
            raise InjectedFault(f"injected engine fault in step {step}")

    def _fail_step(self, step: int, batch: ScheduledBatch, finished: list[FinishEvent],
                   exc: Exception) -> StepOutput:
        """A step that raised: every sequence in it ends with reason `error` (its cache may be half
        written), released exactly once; sequences not in it go on. Too many in a row: broken."""
        in_step = list({id(s): s for s in [*batch.prefills, *batch.decodes, *(c.seq for c in batch.chunks)]}.values())
        with self._state_lock:
            for seq in in_step:
                if seq.status is not SequenceStatus.FINISHED:
                    self._finish(seq, FinishReason.ERROR, step, finished)
            self._steps = step
        self.step_errors += 1
        self._consecutive_errors += 1
        self.last_step_error = f"step {step}: {type(exc).__name__}: {exc}"
        if self._consecutive_errors >= MAX_CONSECUTIVE_STEP_ERRORS:
            raise EngineBroken(f"{self._consecutive_errors} steps failed in a row; last: {self.last_step_error}") \
                from exc
        return StepOutput(step, [], finished, 0, 0, 0, error=self.last_step_error)

    def _whole_prompt_step(self, step: int, batch: ScheduledBatch, finished: list[FinishEvent],
                           on_prefill: Callable[[StepOutput], None] | None) -> StepOutput:
        made: list[tuple[Sequence, int]] = []
        for group in prefill_passes(batch.prefills, self.config.prefill_pass_tokens):
            slots = [self.cache.slots_for(seq.block_table, 0, len(seq.prompt_ids)) for seq in group]
            logits = self.model.prefill_many([seq.prompt_ids for seq in group], slots, self.cache)
            for seq in group:
                seq.prefilled = len(seq.prompt_ids)
            firsts = sampled(logits, group)
            if on_prefill is None:
                made.extend(firsts)
                continue
            early_finished: list[FinishEvent] = []
            early_tokens = self._record_tokens(firsts, step, early_finished)
            on_prefill(StepOutput(step, early_tokens, early_finished, len(group), 0,
                                  sum(len(seq.prompt_ids) for seq in group)))
        context = sum(seq.num_tokens for seq in batch.decodes)
        if batch.decodes:
            logits = self.model.decode(decode_batch(self.cache, batch.decodes, self.use_kernel), self.cache)
            made.extend(sampled(logits, batch.decodes))
        tokens = self._record_tokens(made, step, finished)
        with self._state_lock:
            self._steps = step
        early = on_prefill is not None
        return StepOutput(step, tokens, finished, 0 if early else len(batch.prefills), len(batch.decodes),
                          0 if early else sum(len(s.prompt_ids) for s in batch.prefills), decode_context=context)

    def _mixed_step(self, step: int, batch: ScheduledBatch, finished: list[FinishEvent]) -> StepOutput:
        """Chunked prefill: the decodes and the prompt chunks in one pass; a chunk that ends its
        prompt makes that sequence's first token, handed over with the rest of the step."""
        made: list[tuple[Sequence, int]] = []
        context = sum(seq.num_tokens for seq in batch.decodes)
        if batch.decodes or batch.chunks:
            decode = decode_batch(self.cache, batch.decodes, self.use_kernel) if batch.decodes else None
            logits = self.model.step_forward(decode, [chunk_input(self.cache, c) for c in batch.chunks], self.cache)
            made = sampled(logits, batch.decodes)
            for c in batch.chunks:
                c.seq.prefilled = c.end
                self.blocks.mark_computed(c.seq.seq_id, c.end)  # its full blocks may be shared from now
            firsts = [c.seq for c in batch.chunks if c.last]
            made += sampled(logits, firsts, start=len(batch.decodes))
        tokens = self._record_tokens(made, step, finished)
        with self._state_lock:
            self._steps = step
        return StepOutput(step, tokens, finished, sum(1 for c in batch.chunks if c.last), len(batch.decodes),
                          sum(c.end - c.start for c in batch.chunks), decode_context=context)

    def _record_tokens(self, made: list[tuple[Sequence, int]], step: int,
                       finished: list[FinishEvent]) -> list[TokenEvent]:
        """Append the new tokens to their sequences and finish those they end; the token events."""
        tokens: list[TokenEvent] = []
        with self._state_lock:
            for seq, token_id in made:
                tokens.append(TokenEvent(seq.request_id, len(seq.output_ids), token_id))
                reason = self.scheduler.postprocess(seq, token_id, self.model.eos_token_id)
                if reason is not None:
                    self._finish(seq, reason, step, finished)
            self._tokens_generated += len(made)
        return tokens

    def _apply_inbox(self, step: int, finished: list[FinishEvent]) -> None:
        with self._inbox_lock:
            self._steps_started = step
            wishes, self._inbox = self._inbox, []
        for wish in wishes:
            if wish.kind == "submit":
                self.scheduler.add(wish.seq)
                continue
            seq = self._live.get(wish.request_id)
            if seq is None or seq.status is SequenceStatus.FINISHED:
                continue  # ended already, or never existed: a late wish is harmless
            if wish.kind == "cancel":
                state = "paused" if seq.paused else "waiting" if seq.status is SequenceStatus.WAITING else "running"
                self._cancelled_while[state] += 1
                self._finish(seq, FinishReason.CANCELLED, step, finished)
            elif wish.kind == "stop":
                self._finish(seq, FinishReason.STOP, step, finished)
            elif wish.kind == "pause":
                seq.paused = True
            elif wish.kind == "resume":
                seq.paused = False

    def _finish(self, seq: Sequence, reason: FinishReason, step: int, finished: list[FinishEvent]) -> None:
        self.scheduler.finish(seq, reason, step)
        with self._inbox_lock:
            if self._live.get(seq.request_id) is seq:
                del self._live[seq.request_id]
        self._finished_by_reason[reason.value] += 1
        finished.append(FinishEvent(seq.request_id, reason, len(seq.output_ids), step, seq.closed_at,
                                    seq.closed_after_step))


def sampled(logits: torch.Tensor, seqs: list[Sequence], start: int = 0) -> list[tuple[Sequence, int]]:
    """Each sequence with its next token, from rows start.. of a step's logits (greedy rows in one call)."""
    ids = sample_rows(logits, [seq.params for seq in seqs], [seq.rng for seq in seqs], start)
    return list(zip(seqs, ids))
