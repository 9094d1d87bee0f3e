"""The two servers under test, each in its own process on a free loopback port.

Ours is harness.live.ServerProcess (`streamlab serve`). The peer is transformers' own
`transformers serve --continuous-batching` on a folder written by `streamlab export`.
Both are stopped on every way out, so no process is left behind.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from harness.live import ServerProcess, free_port
from harness.rawhttp import RawExchange

START_DEADLINE_S = 180.0


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


class PeerServer:
    """`transformers serve` with continuous batching, forced to one model, on CPU, in float32."""

    def __init__(self, folder: Path, log_dir: Path) -> None:
        self.folder = folder
        self.port = free_port()
        exe = Path(sys.executable).with_name("transformers")
        self.args = [str(exe), "serve", str(folder), "--continuous-batching", "--device", "cpu",
                     "--dtype", "float32", "--host", "127.0.0.1", "--port", str(self.port),
                     "--log-level", "warning"]
        self.log_path = log_dir / f"peer-{self.port}.log"
        self.proc: subprocess.Popen | None = None

    async def __aenter__(self) -> "PeerServer":
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "w")
        self.proc = subprocess.Popen(self.args, stdout=self._log, stderr=subprocess.STDOUT,
                                     # The same OpenMP wait policy as ours (see streamlab/__init__.py).
                                     env={**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1",
                                          "OMP_WAIT_POLICY": "PASSIVE"})
        deadline = time.monotonic() + START_DEADLINE_S
        try:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"transformers serve exited with {self.proc.returncode}: "
                                       f"{self.log_path.read_text()[-2000:]}")
                try:
                    ex = await RawExchange.open("127.0.0.1", self.port, "GET", "/health", timeout_s=2)
                    try:
                        if (await ex.read_json(2)).get("status") == "ok":
                            return self
                    finally:
                        ex.close_fin()
                except (OSError, asyncio.TimeoutError, ValueError):
                    await asyncio.sleep(0.2)
            raise RuntimeError(f"transformers serve not healthy within {START_DEADLINE_S}s")
        except BaseException:
            self.stop()
            raise

    async def __aexit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(30)
        if self.proc is not None:
            self._log.close()
