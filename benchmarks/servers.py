"""The two servers under test, each in its own process on a free loopback port.

Ours is harness.live.ServerProcess (`streamlab serve`). The peer is transformers' own
`transformers serve --continuous-batching` on a folder written by `streamlab export`: the
harness's `transformers-serve` target (harness.targets), started the same way.
"""

from __future__ import annotations

from pathlib import Path

from harness.live import ServerProcess, TargetProcess, export_folder
from harness.targets import TARGETS

__all__ = ["ours", "export_folder", "peer_server"]


def ours(model: str, *extra: str, log_dir: Path | None = None) -> ServerProcess:
    return ServerProcess(["--model", model, "--log-level", "warning", "--max-batch", "32",
                          "--waiting-limit", "256", *extra], log_dir=log_dir)


def peer_server(folder: Path, log_dir: Path) -> TargetProcess:
    """`transformers serve` with continuous batching, forced to one model, on CPU, in float32."""
    target = TARGETS["transformers-serve"]
    return TargetProcess("transformers serve", target.command, {"model_dir": str(folder)}, target.health,
                         target.start_deadline_s, log_dir)
