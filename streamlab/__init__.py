"""streamlab: a step-driven GPT-2 engine over a paged KV cache, an SSE service, and a scenario harness."""

import os

# Idle OpenMP threads sleep instead of spinning. The step thread shares 2 cores with the event
# loop (and, in tests and benchmarks, with the clients): spinning workers took CPU from them
# and made a 32-sequence decode step in the server 1.25x slower than the same step alone.
# libgomp reads this once, when torch loads it, so it is set before anything imports torch.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

__version__ = "0.1.0"
