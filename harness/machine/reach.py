"""Where the harness may send traffic, and how it reaches a server there (host, port, TLS).

This machine's own loopback names (127.0.0.1, ::1, localhost) are always allowed. Any other host
(a staging server, a container's address, and the other 127.x addresses our tests use to stand in
for one) only with its owner's explicit consent: `--allow-remote HOST` on the command line or
in pytest, or STREAMLAB_ALLOW_REMOTE=HOST[,HOST...] in the environment. Consent names hosts, not
"everything": a load or fault run aimed at a host by mistake is refused before its first byte.
The environment carries it to the processes a run starts (a shard worker, a forked server).
The guard sits where every connection of the harness is opened (harness.clients.rawhttp), so no
path around it exists; the target's validation asks it first, for an early, clear refusal.
"""

from __future__ import annotations

import os
import ssl
from dataclasses import dataclass
from typing import Iterable

ENV = "STREAMLAB_ALLOW_REMOTE"
LOCAL = frozenset({"127.0.0.1", "::1", "localhost"})


def allowed_hosts() -> frozenset[str]:
    return frozenset(h.strip().lower() for h in os.environ.get(ENV, "").replace(" ", ",").split(",") if h.strip())


def consent(hosts: Iterable[str]) -> None:
    """The user allows traffic to these hosts (the command line's --allow-remote), for this
    process and every process it starts."""
    given = {h.strip().lower() for h in hosts if h and h.strip()}
    if given:
        os.environ[ENV] = ",".join(sorted(allowed_hosts() | given))


def refusal(host: str) -> str | None:
    """Why traffic may not go to `host` (None: it may), saying how to consent."""
    host = host.strip("[]").lower()
    if host in LOCAL or host in allowed_hosts():
        return None
    return (f"{host} is not this machine's loopback (127.0.0.1, ::1, localhost): a load or fault run aims at "
            f"another host only with its owner's consent. If you run that server, say so with "
            f"`--allow-remote {host}` (or {ENV}={host})")


def check(host: str) -> None:
    reason = refusal(host)
    if reason:
        raise PermissionError(reason)


def tls_context(ca_file: str | None = None, insecure: bool = False) -> ssl.SSLContext:
    """Verify the server's certificate and name (the system's CAs, or `ca_file`), unless the user
    asked for `insecure` explicitly (a self-signed staging server)."""
    context = ssl.create_default_context(cafile=ca_file)
    if insecure:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


@dataclass(frozen=True)
class Origin:
    """A server as its clients name it: the host and port they mean (the Host header, the name the
    certificate must carry), and TLS where it speaks https. A connection may go elsewhere (a
    Toxiproxy listener that forwards its bytes) and still be to this origin."""
    host: str
    port: int
    tls: ssl.SSLContext | None = None

    @property
    def authority(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"
