"""`streamlab serve` as its own process on a free loopback port. Owns the port and the process.

Every wait has a deadline; stop() ends the process (SIGTERM, then SIGKILL) and is also run
when start-up fails, so no process is left behind.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness.rawhttp import RawExchange

START_DEADLINE_S = 60.0
STOP_DEADLINE_S = 30.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerProcess:
    """`streamlab serve`; a subclass names another server's command and health route."""
    name = "streamlab serve"
    health_path = "/healthz"
    start_deadline_s = START_DEADLINE_S

    def __init__(self, serve_args: list[str], log_dir: Path | None = None) -> None:
        self.port = free_port()
        self.args = self.command(serve_args)
        self.env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.log_path = Path(log_dir or tempfile.mkdtemp(prefix="streamlab-serve-")) / f"serve-{self.port}.log"
        self.proc: subprocess.Popen | None = None

    def command(self, serve_args: list[str]) -> list[str]:
        return [sys.executable, "-m", "streamlab.cli", "serve", "--host", "127.0.0.1", "--port", str(self.port),
                *serve_args]

    async def start(self) -> "ServerProcess":
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "w")
        self.proc = subprocess.Popen(self.args, stdout=self._log, stderr=subprocess.STDOUT, env=self.env)
        deadline = time.monotonic() + self.start_deadline_s
        try:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"{self.name} exited with {self.proc.returncode}: {self.log_tail()}")
                try:
                    if (await self.get_json(self.health_path, timeout_s=2))["status"] == "ok":
                        return self
                except (OSError, asyncio.TimeoutError, ValueError):
                    await asyncio.sleep(0.1)
            raise RuntimeError(f"{self.name} not healthy within {self.start_deadline_s}s: {self.log_tail()}")
        except BaseException:
            self.stop()
            raise

    def stop(self) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(STOP_DEADLINE_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(STOP_DEADLINE_S)
        self._log.close()
        return self.proc.returncode

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text().splitlines()[-lines:])
        except OSError:
            return ""

    async def request(self, method: str, path: str, body=None, **kw) -> RawExchange:
        return await RawExchange.open("127.0.0.1", self.port, method, path, body, **kw)

    async def get_json(self, path: str, timeout_s: float = 10.0) -> dict:
        ex = await self.request("GET", path, timeout_s=timeout_s)
        try:
            return await ex.read_json(timeout_s)
        finally:
            ex.close_fin()

    async def settle(self, deadline_s: float = 30.0) -> dict:
        """Wait (bounded) until nothing runs, waits or is registered; return /stats."""
        deadline = time.monotonic() + deadline_s
        stats = await self.get_json("/stats")
        while time.monotonic() < deadline:
            if stats["running"] == stats["waiting"] == stats["streams_registered"] == 0:
                break
            await asyncio.sleep(0.02)
            stats = await self.get_json("/stats")
        return stats

    async def __aenter__(self) -> "ServerProcess":
        return await self.start()

    async def __aexit__(self, *exc) -> None:
        self.stop()
