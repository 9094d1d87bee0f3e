"""What the engine lets others read: its counts, sizes, queue and invariants, each under the
engine's locks. Mixed into BatchEngine (engine.py), which owns the state; nothing here changes it.
"""

from __future__ import annotations

import threading

from streamlab.config import EngineConfig
from streamlab.deadline import QueueSnapshot
from streamlab.engine.blocks import BlockManager
from streamlab.engine.outputs import EngineStats
from streamlab.engine.scheduler import Scheduler
from streamlab.engine.sequence import Sequence, SequenceStatus, Wish


class EngineInspection:
    """The attributes below are BatchEngine's, read here."""
    config: EngineConfig
    blocks: BlockManager
    scheduler: Scheduler
    _inbox: list[Wish]
    _inbox_lock: threading.Lock
    _state_lock: threading.Lock
    _live: dict[str, Sequence]
    _steps: int
    _tokens_generated: int
    _submitted: int
    _finished_by_reason: dict[str, int]
    _cancelled_while: dict[str, int]

    # ---- inspection ----

    def live_request_ids(self) -> list[str]:
        """Requests submitted and not yet finished (the inbox included)."""
        with self._inbox_lock:
            return list(self._live)

    def stats(self) -> EngineStats:
        with self._state_lock:
            with self._inbox_lock:
                pending = sum(1 for w in self._inbox if w.kind == "submit")
            sched = self.scheduler
            cached = self.blocks.cache_stats()
            return EngineStats(
                blocks_total=self.blocks.num_blocks, blocks_free=self.blocks.num_free,
                blocks_reserved=self.blocks.num_held, waiting=len(sched.waiting) + pending,
                running=len(sched.running), paused=sum(1 for s in sched.running if s.paused),
                releases=self.blocks.ledger.releases,
                double_release_attempts=self.blocks.ledger.double_release_attempts,
                steps=self._steps, tokens_generated=self._tokens_generated,
                requests_submitted=self._submitted, requests_finished=sum(self._finished_by_reason.values()),
                finished_by_reason=dict(self._finished_by_reason), cancelled_while=dict(self._cancelled_while),
                blocks_cached=cached.cached_blocks, blocks_evictable=cached.evictable_blocks,
                prefix_hit_blocks=cached.hit_blocks, prefix_queried_blocks=cached.queried_blocks,
                prefix_evictions=cached.evictions)

    def sizes(self) -> dict[str, int]:
        """Every per-request collection the engine keeps: all must stay bounded on a long-running server."""
        with self._state_lock:
            with self._inbox_lock:
                return {"engine_live": len(self._live), "engine_inbox": len(self._inbox),
                        "scheduler_waiting": len(self.scheduler.waiting),
                        "scheduler_running": len(self.scheduler.running),
                        "ledger_entries": len(self.blocks.ledger.entries),
                        "ledger_forgotten": self.blocks.ledger.forgotten,
                        "block_tables": len(self.blocks.holders())}

    def is_waiting(self, request_id: str) -> bool:
        """Submitted and not yet admitted (holds no blocks yet)."""
        with self._inbox_lock:
            seq = self._live.get(request_id)
            return seq is not None and seq.status is SequenceStatus.WAITING

    def queue_snapshot(self) -> QueueSnapshot:
        """The queue as the deadline gate sees it (streamlab.deadline)."""
        with self._state_lock:
            with self._inbox_lock:
                pending = [w.seq for w in self._inbox if w.kind == "submit"]
            sched = self.scheduler
            chunked = self.config.step_token_budget > 0
            return QueueSnapshot(
                self.config.max_batch, self.config.step_token_budget, self.config.prefill_chunk_tokens,
                [len(s.prompt_ids) - s.prefilled if chunked else 0 for s in sched.running],
                [s.params.max_new_tokens - len(s.output_ids) for s in sched.running],
                [len(s.prompt_ids) for s in [*sched.waiting, *pending]],
                [s.params.max_new_tokens for s in [*sched.waiting, *pending]])

    def check_invariants(self) -> list[str]:
        """Broken invariants of the block pool and the scheduler; empty when healthy."""
        with self._state_lock:
            problems = self.blocks.check_invariants()
            sched = self.scheduler
            for seq in sched.running:
                if not self.blocks.holds(seq.seq_id):
                    problems.append(f"running sequence {seq.request_id!r} holds no blocks")
                elif len(seq.block_table) != sched.blocks_needed(seq):
                    problems.append(f"sequence {seq.request_id!r} holds {len(seq.block_table)} blocks, "
                                    f"needs {sched.blocks_needed(seq)}")
            for seq in sched.waiting:
                if self.blocks.holds(seq.seq_id):
                    problems.append(f"waiting sequence {seq.request_id!r} holds blocks")
            if len(sched.running) > self.config.max_batch:
                problems.append(f"{len(sched.running)} running, over max_batch {self.config.max_batch}")
            live_ids = {s.seq_id for s in sched.running}
            held_ids = self.blocks.holders()
            if held_ids != live_ids:
                problems.append(f"blocks held by sequences not running: {sorted(held_ids - live_ids)[:8]}")
            return problems

    def check_released(self) -> list[str]:
        """When idle: every sequence that was admitted was released exactly once."""
        return self.blocks.ledger.problems()
