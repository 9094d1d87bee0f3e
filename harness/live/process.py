"""`streamlab serve` as its own process on a free loopback port. Owns the port and the process.

Every wait has a deadline; stop() ends the process (SIGTERM, then SIGKILL) and is also run
when start-up fails, so no process is left behind.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness.machine.cores import server_threads, thread_fill
from harness.clients.rawhttp import RawExchange
from harness.machine.reach import Origin
from streamlab.idle import drained

START_DEADLINE_S = 60.0
STOP_DEADLINE_S = 30.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_listening(proc: subprocess.Popen, port: int, deadline_s: float) -> str | None:
    """Until something listens on the loopback port (None), or the process exits, or the deadline
    passes (what went wrong, in words). For servers with no health route (Toxiproxy, nginx)."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return f"exited with {proc.returncode}"
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return None
        except OSError:
            time.sleep(0.05)
    return f"did not listen within {deadline_s:g}s"


class ServerProcess:
    """`streamlab serve`; a subclass names another server's command and health route."""
    name = "streamlab serve"
    health_path = "/healthz"
    start_deadline_s = START_DEADLINE_S

    def __init__(self, serve_args: list[str], log_dir: Path | None = None, source: Path | None = None) -> None:
        self.port = free_port()
        self.args = self.command(serve_args)
        self.env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        # source: our server's code from another checkout (a compared git revision), run as its own
        # process from that folder, first on its path; never forked from this process's imports.
        self.source = source
        if source is not None:
            self.env["PYTHONPATH"] = os.pathsep.join([str(source), *filter(None, [os.environ.get("PYTHONPATH")])])
        self.env["OMP_NUM_THREADS"] = str(server_threads())  # a core left for its event loop and the load
        self.log_path = Path(log_dir or tempfile.mkdtemp(prefix="streamlab-serve-")) / f"serve-{self.port}.log"
        self.proc: subprocess.Popen | None = None  # or a harness.live.zygote.ForkedServer, driven alike
        self._log = None

    def command(self, serve_args: list[str]) -> list[str]:
        # --debug: the harness reads the server's own books (/debug/releases, /debug/steps, /metrics).
        return [sys.executable, "-m", "streamlab.cli", "serve", "--host", "127.0.0.1", "--port", str(self.port),
                "--debug", *serve_args]

    def forked(self) -> bool:
        """Our own server is forked from an imported one (harness.live.zygote: 0.6 s a start, not 3 s)
        unless STREAMLAB_FORK_SERVERS=0; another server's command runs as it is."""
        return (type(self).command is ServerProcess.command and self.source is None
                and os.environ.get("STREAMLAB_FORK_SERVERS") != "0")

    async def start(self) -> "ServerProcess":
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        if self.forked():
            from harness.live.zygote import start_server
            self.proc = await asyncio.to_thread(start_server, self.args[3:], self.env, str(self.log_path))
        else:
            self._log = open(self.log_path, "w")
            # From its source folder, where one is given: `python -m` puts the working folder first on the path.
            self.proc = subprocess.Popen(self.args, stdout=self._log, stderr=subprocess.STDOUT, env=self.env,
                                         cwd=self.source)
        deadline = time.monotonic() + self.start_deadline_s
        try:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"{self.name} exited with {self.proc.returncode}: {self.log_tail()}")
                try:
                    if await self.is_healthy():
                        return self
                except (OSError, asyncio.TimeoutError, ValueError, KeyError):
                    pass
                await asyncio.sleep(0.1)
            raise RuntimeError(f"{self.name} not healthy within {self.start_deadline_s}s: {self.log_tail()}")
        except BaseException:
            self.stop()
            raise

    async def is_healthy(self) -> bool:
        return (await self.get_json(self.health_path, timeout_s=2))["status"] == "ok"

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

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
        if self._log is not None:
            self._log.close()
        return self.proc.returncode

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text().splitlines()[-lines:])
        except OSError:
            return ""

    @property
    def origin(self) -> Origin:
        """Where the server is, as its clients name it (here: our loopback port, plain http)."""
        return Origin("127.0.0.1", self.port)

    async def request(self, method: str, path: str, body=None, **kw) -> RawExchange:
        """A request straight to the server (no proxy): its books, gauges, health, solo references."""
        origin = self.origin
        return await RawExchange.open(origin.host, origin.port, method, path, body, origin=origin, **kw)

    async def get_json(self, path: str, timeout_s: float = 10.0, headers: dict[str, str] | None = None) -> dict:
        return json.loads(await self.get_body(path, timeout_s, headers))

    async def get_body(self, path: str, timeout_s: float = 10.0, headers: dict[str, str] | None = None) -> bytes:
        ex = await self.request("GET", path, timeout_s=timeout_s, headers=headers)
        try:
            head = await ex.read_head(timeout_s)
            body = await ex.read_body(timeout_s)
        finally:
            ex.close_fin()
        if head.status != 200:
            raise ValueError(f"GET {path}: {head.status} {body[:200]!r}")
        return body

    async def settle(self, deadline_s: float = 30.0) -> dict:
        """Wait (bounded) until nothing runs, waits or is registered, or the step loop has failed
        (it will never drain: the run waited out the whole deadline, 30 s); return /stats."""
        deadline = time.monotonic() + deadline_s
        stats = await self.get_json("/stats")
        while time.monotonic() < deadline:
            if drained(stats) or stats.get("failure"):
                break
            await asyncio.sleep(0.02)
            stats = await self.get_json("/stats")
        return stats

    async def __aenter__(self) -> "ServerProcess":
        return await self.start()

    async def __aexit__(self, *exc) -> None:
        self.stop()


def filled(value: str, fill: dict[str, str]) -> str:
    """An environment value with the fill's {names} put in; any other brace is left as written."""
    for name, text in fill.items():
        value = value.replace("{" + name + "}", text)
    return value


class TargetProcess(ServerProcess):
    """Another server, started from a target's command with {port}, {transformers} (the
    `transformers` script beside this Python) and the endpoint's `fill` (harness.live.backend: the
    model exported, the engine's binary) filled in. It keeps its own
    OpenMP wait policy rather than the passive one streamlab sets for itself: measured faster for
    transformers serve (85-90 against 77-81 tokens/s at 32 streams in a side run). Its compute
    threads follow the same rule as ours (harness.machine.cores): torch's by OMP_NUM_THREADS, and
    an engine with threads of its own by {threads} or {cores} in its command or environment
    (llama-server's -t, vLLM's VLLM_CPU_OMP_THREADS_BIND), so all are compared on equal threads."""

    def __init__(self, name: str, template: list[str], fill: dict[str, str], health_path: str | None,
                 start_deadline_s: float = 180.0, log_dir: Path | None = None,
                 env: dict[str, str] | None = None) -> None:
        fill = {**thread_fill(), **fill}  # {threads} and {cores} mean the same in every foreign server
        self.name, self.template, self.fill = name, template, fill
        self.health_path, self.start_deadline_s = health_path, start_deadline_s
        super().__init__([], log_dir)
        # Its environment's values take the fill too ({threads}, {cores}: harness.machine.cores).
        self.env.update({"HF_HUB_OFFLINE": "1", **{k: filled(v, fill) for k, v in (env or {}).items()}})
        self.env.pop("OMP_WAIT_POLICY", None)

    def command(self, serve_args: list[str]) -> list[str]:
        values = {"transformers": str(Path(sys.executable).with_name("transformers")), **self.fill,
                  "port": str(self.port)}
        return [part.format(**values) for part in self.template]

    async def is_healthy(self) -> bool:
        if self.health_path is None:  # no health route: accepting connections is all we can ask
            (await self.request("GET", "/")).close_fin()
            return True
        ex = await self.request("GET", self.health_path, timeout_s=2)
        try:
            return (await ex.read_head(2)).status == 200
        finally:
            ex.close_fin()


class RunningServer:
    """A server someone else started (a target's URL, here or on a host the user consented to,
    http or https): nothing to start or stop."""
    name = "running server"

    def __init__(self, origin: Origin, health_path: str | None) -> None:
        self.origin, self.health_path = origin, health_path
        self.port = origin.port

    request = ServerProcess.request
    get_json = ServerProcess.get_json
    get_body = ServerProcess.get_body
    settle = ServerProcess.settle  # our own server at a URL (profile streamlab) is settled as one we started
    is_healthy = TargetProcess.is_healthy

    async def start(self) -> "RunningServer":
        try:
            if await self.is_healthy():
                return self
        except (OSError, asyncio.TimeoutError) as exc:  # ssl.SSLError is an OSError: a certificate refused
            raise RuntimeError(f"nothing answers on {self.origin.authority}: {exc}") from None
        raise RuntimeError(f"the server on {self.origin.authority} is not healthy at {self.health_path}")

    def alive(self) -> bool:
        return True

    def stop(self) -> None:
        return None

    def log_tail(self, lines: int = 20) -> str:
        return ""


def export_gguf_file(model: str, folder: Path) -> Path:
    """A streamlab model as one GGUF file for llama.cpp (exported once)."""
    from streamlab.export import gguf_path

    path = gguf_path(folder, model)
    if not path.exists():
        subprocess.run([sys.executable, "-m", "streamlab.cli", "export", model, str(folder), "--format", "gguf"],
                       check=True, stdout=subprocess.DEVNULL)
    return path


def export_folder(model: str, folder: Path) -> Path:
    """A streamlab model as a transformers folder (exported once; again if incomplete)."""
    if not (folder / "model.safetensors").exists() or not (folder / "tokenizer.json").exists():
        import shutil

        shutil.rmtree(folder, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "streamlab.cli", "export", model, str(folder)], check=True,
                       stdout=subprocess.DEVNULL)
    return folder


def target_process(target, model: str, max_batch: int, exports: Path,
                   log_dir: Path | None = None) -> tuple[TargetProcess, str]:
    """A command target's server for `model` (exported as its command needs: a transformers
    folder or a GGUF file) with `max_batch` sequences, and the model name its requests carry.
    The one way a foreign server is started: by live runs and by the peer benchmark."""
    from harness.targets.engines import BINARIES, binaries_missing
    from streamlab.presets import PRESETS

    positions = PRESETS[model].shape.n_positions if model in PRESETS else 1024
    fill = {"model": model, "max_batch": str(max_batch), "positions": str(positions),
            "context": str(max_batch * positions)}
    served = model
    if target.uses("model_dir"):
        served = fill["model_dir"] = str(export_folder(model, exports / f"{model}-hf"))
    if target.uses("model_gguf"):
        served = fill["model_gguf"] = str(export_gguf_file(model, exports))
    if binaries_missing(target.uses):
        raise RuntimeError(f"{target.name}: {binaries_missing(target.uses)}")
    fill.update({name: str(where()) for name, (where, _) in BINARIES.items() if target.uses(name)})
    return (TargetProcess(target.name, target.command, fill, target.health, target.start_deadline_s, log_dir,
                          env=target.env), target.model or served)
