"""The Ray actor that runs one shard of a scenario's clients (harness.live.shards). Imported only
where Ray is installed (the `scale` extra)."""

from __future__ import annotations

import time

import ray

from harness.live.loops import run_on_live_loop
from streamlab.quiet_gc import quiet_collector


@ray.remote
class ShardWorker:
    def now(self) -> float:
        """This worker's monotonic clock, for the coordinator's offset measurement."""
        return time.monotonic()

    def node(self) -> str:
        return ray.get_runtime_context().get_node_id()

    def run(self, job, shard):
        """`job(shard)`, a coroutine function (harness.live.shards' prepare_shard or run_shard, handed
        over by reference)."""
        with quiet_collector():  # as a single process does (harness.live.backend): no collection mid-run
            return run_on_live_loop(job(shard))
