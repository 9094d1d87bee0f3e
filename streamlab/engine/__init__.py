"""The engine: sequences, blocks, the KV cache, the scheduler and the step loop's one round."""
