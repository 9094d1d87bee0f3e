"""The servers under test, each in its own process on a free loopback port.

Ours is harness.live.process.ServerProcess (`streamlab serve`). The peers are the harness's command
targets (harness.format.target), started as a target run starts them (harness.live.process.target_process):
`transformers serve --continuous-batching` on a folder written by `streamlab export`, vLLM's
CPU backend on the same folder, and llama.cpp's `llama-server` on the same weights as GGUF.
"""

from __future__ import annotations

from pathlib import Path

from harness.live.process import ServerProcess, TargetProcess, target_process
from harness.format.target import TARGETS

__all__ = ["ours", "peer_server", "peer_command", "PEERS", "peer_missing", "peer_version"]

# The peers, in the order they run; each is skipped, with its reason, where it is not installed.
PEERS = ("transformers-serve", "llamacpp", "vllm")
EXPORTS = Path("results") / "benchmarks"


def ours(model: str, *extra: str, log_dir: Path | None = None) -> ServerProcess:
    return ServerProcess(["--model", model, "--log-level", "warning", "--max-batch", "32",
                          "--waiting-limit", "256", *extra], log_dir=log_dir)


def peer_missing(name: str) -> str | None:
    """Why a peer cannot run here (its engine is not installed), or None."""
    from harness.targets.engines import binaries_missing

    return binaries_missing(TARGETS[name].uses)


def peer_version(name: str) -> str:
    """What a peer is, as installed here: its package and version."""
    from harness.targets.engines import BINARIES, installed

    uses = [b for b in BINARIES if TARGETS[name].uses(b)]
    if not uses:  # transformers serve: the transformers in our own environment
        import transformers

        return f"transformers=={transformers.__version__}"
    return installed(uses[0]) or f"${uses[0]} (not installed by scripts/dev)"


# Each peer's prompt cache, off. Ours has none, and the benchmark sends the same 32 prompts at
# every level and repetition, so a peer with one answers repeats from memory: in the first run
# with it on, llama-server's TTFT p50 at 32 read 864 ms on the first repetition and 135 and
# 86 ms on the next two. (The target runs keep each server as it ships: caching is part of
# what a user runs there.)
NO_PROMPT_CACHE = {"llamacpp": ["--no-cache-prompt", "--cache-ram", "0"], "vllm": ["--no-enable-prefix-caching"]}


def peer_server(name: str, model: str, max_batch: int, log_dir: Path) -> tuple[TargetProcess, str]:
    """A peer serving `model` with `max_batch` sequences, and the model name its requests carry."""
    target = TARGETS[name].model_copy(update={"command": peer_command(name)})
    return target_process(target, model, max_batch, EXPORTS, log_dir)


def peer_command(name: str) -> list[str]:
    """The command a peer is benchmarked with: its target's, prompt cache off."""
    return [*TARGETS[name].command, *NO_PROMPT_CACHE.get(name, [])]
