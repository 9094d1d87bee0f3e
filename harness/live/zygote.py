"""`streamlab serve` started by fork from a process that has already imported it.

A live run starts its own server; 2.2 of the 3 s a start took here were `import torch`, and a
suite starts a server about 200 times (its runs, their baselines and the machine fit's rounds).
A zygote imports streamlab's server once and forks a fresh process for each start: each server
is still its own process, on its own port, with its own engine, cache and books, and it ends as
a process started with Popen does (SIGTERM, then SIGKILL).

A zygote is started with the exact environment its servers need (ServerProcess.env), and a
start whose environment differs gets a zygote of its own, so a variable read at start-up
(OMP_NUM_THREADS, a PYTHONPATH with a sitecustomize) acts as it does on a fresh interpreter.
The forked server is the zygote's child: the zygote waits for it and answers `poll`.
Owns: the zygote processes (ended at exit) and the pipe to each.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
import traceback

START_DEADLINE_S = 60.0  # the zygote's own imports
_zygotes: dict[tuple, "Zygote"] = {}
_lock = threading.Lock()


class ForkedServer:
    """A forked server, driven like subprocess.Popen (poll, wait, send_signal, kill, returncode)."""

    def __init__(self, zygote: "Zygote", pid: int) -> None:
        self.zygote, self.pid, self.returncode = zygote, pid, None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self.zygote.exit_code(self.pid)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = time.monotonic() + (timeout if timeout is not None else 3600.0)
        while self.poll() is None:
            if time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"server {self.pid}", timeout)
            time.sleep(0.01)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class Zygote:
    def __init__(self, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "harness.live.zygote"], env=env, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, bufsize=1)
        self.ask_lock = threading.Lock()
        self.live: set[int] = set()  # its forked servers not yet seen ended
        ready = self._read(START_DEADLINE_S)
        if ready.get("ready") is not True:
            raise RuntimeError(f"the server zygote did not start: {ready}")

    def _read(self, deadline_s: float) -> dict:
        # One line answers each request, so nothing waits in the pipe's buffer when select looks.
        if not select.select([self.proc.stdout], [], [], deadline_s)[0]:
            self.proc.kill()
            raise RuntimeError(f"the server zygote did not answer within {deadline_s:g}s")
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the server zygote exited with {self.proc.wait(deadline_s)}")
        return json.loads(line)

    def ask(self, request: dict) -> dict:
        with self.ask_lock:
            self.proc.stdin.write(json.dumps(request) + "\n")
            self.proc.stdin.flush()
            return self._read(START_DEADLINE_S)

    def fork(self, argv: list[str], log_path: str) -> ForkedServer:
        server = ForkedServer(self, self.ask({"fork": argv, "log": log_path})["pid"])
        self.live.add(server.pid)
        return server

    def exit_code(self, pid: int) -> int | None:
        """A forked server's exit code (negative: the signal that ended it), or None while it runs."""
        code = self.ask({"poll": pid})["code"]
        if code is not None:
            self.live.discard(pid)
        return code

    def idle(self) -> bool:
        """None of its servers still runs."""
        return all(self.exit_code(pid) is not None for pid in list(self.live))

    def close(self) -> None:
        try:
            self.proc.stdin.close()  # the zygote's loop ends on end of input
            self.proc.wait(10)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait(10)
        self.proc.stdout.close()


# Set by pytest for each item: not read by a server, and a zygote per item held 0.4 GB each
# until a CI run here was killed for memory.
VOLATILE = frozenset({"PYTEST_CURRENT_TEST"})


def start_server(argv: list[str], env: dict[str, str], log_path: str) -> ForkedServer:
    """`streamlab <argv>` (a `serve` command line) forked from a zygote started with `env`. A
    zygote none of whose servers still runs is ended when another is needed: at most one idle."""
    key = (sys.executable, tuple(sorted((k, v) for k, v in env.items() if k not in VOLATILE)))
    with _lock:
        zygote = _zygotes.get(key)
        if zygote is None or zygote.proc.poll() is not None:
            zygote = _zygotes[key] = Zygote(env)
        for other_key, other in list(_zygotes.items()):
            if other is not zygote and other.idle():
                other.close()
                del _zygotes[other_key]
    return zygote.fork(argv, log_path)


@atexit.register
def _close_all() -> None:
    for zygote in _zygotes.values():
        zygote.close()


# ---- the zygote itself: `python -m harness.live.zygote` ----

def _child(argv: list[str], log_path: str, pipes: tuple[int, int]) -> None:
    """In the forked process: the server, its output in its log; never returns."""
    code = 1
    try:
        for fd in pipes:
            os.close(fd)
        log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(log)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        from streamlab.cli import main
        sys.argv = ["streamlab", *argv]
        code = main(argv)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code or 0)


def _serve_requests() -> None:
    import streamlab.cli  # noqa: F401  (what every server imports: torch, transformers, the app)
    import streamlab.server  # noqa: F401
    import streamlab.models  # noqa: F401

    import gc
    gc.freeze()  # the imported objects stay out of the servers' collections: no copy-on-write of their pages
    out = sys.stdout
    pipes = (sys.stdin.fileno(), out.fileno())
    codes: dict[int, int] = {}
    print(json.dumps({"ready": True}), file=out, flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        if "fork" in request:
            out.flush()
            pid = os.fork()
            if pid == 0:
                _child(request["fork"], request["log"], pipes)
            answer = {"pid": pid}
        else:
            pid = request["poll"]
            if pid not in codes:
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    codes[pid] = os.waitstatus_to_exitcode(status)  # -15: ended by SIGTERM, as Popen says
            answer = {"code": codes.get(pid)}
        print(json.dumps(answer), file=out, flush=True)


if __name__ == "__main__":
    _serve_requests()
