"""Toxiproxy: the real toxiproxy-server, driven through the toxiproxy-python client.

The client keeps its server address in class state (APIConsumer.host/port) and sets no
timeout on any call: this module owns that state (one ToxiproxyClient per server) and runs every
client call under a deadline in a worker thread, so a hung API call cannot hang a test.

Traps designed around (from Toxiproxy's source and issue tracker):
- a client's RST through the proxy reaches the server as an ordinary FIN: groups whose RST
  the server must see run on a direct path (`network.direct`, or no network section);
- reset_peer sends a real RST only if the toxic existed before the connection opened, and
  swallows the first chunk in its direction: toxics are set before any client connects;
- `-seed` has had no effect since v2.9: all randomness (jitter aside) comes from our seed;
- removing toxics while traffic flows has hung its API: we reset only with no traffic.
"""

from __future__ import annotations

import concurrent.futures
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from harness.live.process import free_port, wait_listening
from harness.format.toxics import ToxicSpec

API_TIMEOUT_S = 5.0
START_DEADLINE_S = 15.0
PROJECT_BIN = Path(__file__).resolve().parents[2] / ".tools" / "bin" / "toxiproxy-server"


class ToxiproxyUnavailable(RuntimeError):
    pass


def find_binary() -> Path | None:
    for candidate in (os.environ.get("TOXIPROXY_SERVER"), str(PROJECT_BIN), shutil.which("toxiproxy-server")):
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return Path(candidate)
    return None


class ToxiproxyServer:
    """toxiproxy-server on a free loopback port; start() waits (bounded) for its API."""

    def __init__(self, binary: Path | None = None) -> None:
        found = binary or find_binary()
        if found is None:
            raise ToxiproxyUnavailable("toxiproxy-server not found: run `scripts/dev setup` (installs it with "
                                       "`go install github.com/Shopify/toxiproxy/v2/cmd/server@v2.12.0`)")
        self.binary = found
        self.port = free_port()
        self.proc: subprocess.Popen | None = None
        self.log_path = Path(tempfile.mkdtemp(prefix="toxiproxy-")) / "toxiproxy.log"

    def start(self) -> "ToxiproxyServer":
        self._log = open(self.log_path, "w")
        self.proc = subprocess.Popen([str(self.binary), "-host", "127.0.0.1", "-port", str(self.port)],
                                     stdout=self._log, stderr=subprocess.STDOUT)
        problem = wait_listening(self.proc, self.port, START_DEADLINE_S)
        if problem is None:
            return self
        self.stop()
        raise ToxiproxyUnavailable(f"toxiproxy-server {problem}: {self.log_path.read_text()[-2000:]}")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        if self.proc:
            self._log.close()


@dataclass
class ProxyHandle:
    name: str
    listen_port: int
    proxy: object  # toxiproxy.proxy.Proxy


class ToxiproxyClient:
    """The one owner of the toxiproxy-python client's (class-level) server address."""

    def __init__(self, server: ToxiproxyServer) -> None:
        from toxiproxy import Toxiproxy
        from toxiproxy.api import APIConsumer

        APIConsumer.host, APIConsumer.port = "127.0.0.1", server.port
        self._client = Toxiproxy()
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="toxiproxy-api")

    def _call(self, fn, *args, **kwargs):
        try:
            return self._pool.submit(fn, *args, **kwargs).result(timeout=API_TIMEOUT_S)
        except concurrent.futures.TimeoutError:
            raise ToxiproxyUnavailable(f"Toxiproxy API call {getattr(fn, '__name__', fn)} took over "
                                       f"{API_TIMEOUT_S}s") from None

    def create_proxy(self, name: str, upstream: int | str, toxics: list[ToxicSpec]) -> ProxyHandle:
        """A proxy to the server (a loopback port, or HOST:PORT: a remote target the user consented
        to; Toxiproxy forwards TCP, TLS included) with its toxics set now, before any client connects."""
        if isinstance(upstream, int):
            upstream = f"127.0.0.1:{upstream}"
        proxy = self._call(self._client.create, upstream=upstream, name=name,
                           listen="127.0.0.1:0")
        for i, toxic in enumerate(toxics):
            self._call(proxy.add_toxic, name=f"{toxic.type}_{toxic.stream}_{i}", type=toxic.type,
                       stream=toxic.stream, toxicity=toxic.toxicity, attributes=toxic.attributes())
        listen = self._call(self._client.get_proxy, name).listen
        return ProxyHandle(name, int(listen.rsplit(":", 1)[1]), proxy)

    def proxy_groups(self, prefix: str, groups: list, upstream: int | str) -> dict[str, ProxyHandle]:
        """One proxy per group (named PREFIX__GROUP), each with the group's toxics, to `upstream`:
        the coordinator's proxies and a shard worker's own are made alike."""
        return {g.name: self.create_proxy(f"{prefix}__{g.name}", upstream, g.network.toxics if g.network else [])
                for g in groups}

    def add_toxic(self, handle: ProxyHandle, name: str, toxic: ToxicSpec) -> None:
        """A toxic on a proxy that may have connections open: Toxiproxy applies it to them too."""
        self._call(handle.proxy.add_toxic, name=name, type=toxic.type, stream=toxic.stream,
                   toxicity=toxic.toxicity, attributes=toxic.attributes())

    def remove_toxic(self, handle: ProxyHandle, name: str) -> None:
        self._call(handle.proxy.destroy_toxic, name)

    def toxics(self, handle: ProxyHandle) -> dict:
        return self._call(handle.proxy.toxics)

    def set_enabled(self, handle: ProxyHandle, enabled: bool) -> None:
        """Down: the proxy drops its connections and stops listening; up: it listens again."""
        self._call(handle.proxy.enable if enabled else handle.proxy.disable)

    def reset(self) -> None:
        """Between scenarios, with no traffic: remove every proxy (and so every toxic)."""
        self._call(self._client.reset)
        self._call(self._client.destroy_all)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
