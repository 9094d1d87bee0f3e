"""How many torch threads a server the harness starts gets: one fewer than the cores, at least one.

The server's event loop and the harness's clients need a core too. With torch's default (a
thread per core) on this 2-core machine, its second thread competed with them, and the live
server's decode step flipped between speeds within a run (300 tokens at batch 4: 0.85 ms for a
while, then 1.6 ms; at batch 1 0.6, then 0.84 ms) as threads moved over the cores; no cost model
can say which. With one torch thread the same runs held: batch 4 0.66-0.86 ms, rising with
context. It is also faster on this model: a tiny decode step in-process took 0.30 ms against
0.66 ms on two threads. Pinning the server to a core of its own was tried and refused: its
event loop then shared that core with the step thread, and healthy readers' queues filled
(slow_reader_drop_2 dropped all six).

`STREAMLAB_SERVER_THREADS=N` overrides it; the engine's in-process calibration uses the same, and
so does every other server the harness or the benchmarks start (thread_fill: llama-server's -t,
vLLM's bound cores), so servers are compared on equal threads.
"""

from __future__ import annotations

import os
from contextlib import contextmanager


def server_threads() -> int:
    if os.environ.get("STREAMLAB_SERVER_THREADS"):
        return max(1, int(os.environ["STREAMLAB_SERVER_THREADS"]))
    return max(1, len(os.sched_getaffinity(0)) - 1)


def thread_fill(threads: int | None = None) -> dict[str, str]:
    """What a foreign server's command and environment are filled with: {threads}, the compute
    threads, and {cores}, that many cores as a list ("0-1"), for an engine that binds its threads."""
    n = threads or server_threads()
    return {"threads": str(n), "cores": "0" if n == 1 else f"0-{n - 1}"}


@contextmanager
def torch_threads(n: int):
    """torch's intra-op threads set to n for the block, then put back."""
    import torch
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)
