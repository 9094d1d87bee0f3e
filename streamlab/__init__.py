"""streamlab: a step-driven GPT-2 engine over a paged KV cache, an SSE service, and a scenario harness."""

__version__ = "0.1.0"
