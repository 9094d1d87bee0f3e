"""The two servers under test, each in its own process on a free loopback port.

Ours is harness.live.ServerProcess (`streamlab serve`). The peer is transformers' own
`transformers serve --continuous-batching` on a folder written by `streamlab export`, run by
the same process owner, so it is stopped on every way out too.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from harness.live import ServerProcess


def ours(model: str, *extra: str, log_dir: Path | None = None) -> ServerProcess:
    return ServerProcess(["--model", model, "--log-level", "warning", "--max-batch", "32",
                          "--waiting-limit", "256", *extra], log_dir=log_dir)


def export_folder(model: str, folder: Path) -> Path:
    """The model as a transformers folder (exported once; re-exported if incomplete)."""
    if not (folder / "model.safetensors").exists() or not (folder / "tokenizer.json").exists():
        shutil.rmtree(folder, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "streamlab.cli", "export", model, str(folder)], check=True,
                       stdout=subprocess.DEVNULL)
    return folder


class PeerServer(ServerProcess):
    """`transformers serve` with continuous batching, forced to one model, on CPU, in float32."""
    name = "transformers serve"
    health_path = "/health"
    start_deadline_s = 180.0

    def __init__(self, folder: Path, log_dir: Path) -> None:
        self.folder = folder
        super().__init__([], log_dir)
        self.env["HF_HUB_OFFLINE"] = "1"
        # Its own OpenMP default (spinning workers), not the passive policy streamlab sets for
        # itself: in a side run at 32 streams the peer did 85-90 tok/s with its default and 77-81
        # with ours, so it is measured at its best of the two.
        self.env.pop("OMP_WAIT_POLICY", None)

    def command(self, serve_args: list[str]) -> list[str]:
        return [str(Path(sys.executable).with_name("transformers")), "serve", str(self.folder),
                "--continuous-batching", "--device", "cpu", "--dtype", "float32", "--host", "127.0.0.1",
                "--port", str(self.port), "--log-level", "warning", *serve_args]
