"""nginx as a reverse proxy between Toxiproxy and the server: its own prefix, config and port.

Default buffering unless a scenario says otherwise; TLS and HTTP/2 to the client with a
self-signed certificate (made at set-up, `.tools/tls/`); a client's disconnect reaches the
server because nginx closes the upstream connection when its client goes
(proxy_ignore_client_abort off, its default). Every wait has a deadline; stop() always runs.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from harness.live.process import free_port, wait_listening

TLS_DIR = Path(__file__).resolve().parents[2] / ".tools" / "tls"
START_DEADLINE_S = 10.0


def nginx_binary() -> str | None:
    return shutil.which("nginx") or next((p for p in ("/usr/sbin/nginx", "/usr/local/sbin/nginx")
                                          if os.access(p, os.X_OK)), None)


def nginx_unavailable() -> str | None:
    if nginx_binary() is None:
        return "nginx is not installed (Debian: apt-get install nginx; scripts/dev setup does it as root)"
    return None


def ensure_certificate() -> tuple[Path, Path]:
    """A self-signed certificate for localhost and 127.0.0.1 (it is its own CA for the clients)."""
    cert, key = TLS_DIR / "cert.pem", TLS_DIR / "key.pem"
    if not cert.exists() or not key.exists():
        TLS_DIR.mkdir(parents=True, exist_ok=True)
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "3650",
                        "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
                        "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True, timeout=60)
    return cert, key


def config_text(listen_port: int, upstream_port: int, prefix: Path, tls: bool, http2: bool, read_timeout_s: float,
                honour_accel_buffering: bool, buffering: bool) -> str:
    cert, key = ensure_certificate() if tls else (None, None)
    listen = f"listen 127.0.0.1:{listen_port}" + (" ssl" if tls else "") + (" http2" if http2 else "") + ";"
    tls_lines = f"ssl_certificate {cert};\n        ssl_certificate_key {key};" if tls else ""
    return f"""
{"user root;" if os.geteuid() == 0 else ""}
worker_processes 1;
error_log {prefix}/error.log warn;
pid {prefix}/nginx.pid;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    client_body_temp_path {prefix}/body;
    proxy_temp_path {prefix}/proxy;
    fastcgi_temp_path {prefix}/fastcgi;
    uwsgi_temp_path {prefix}/uwsgi;
    scgi_temp_path {prefix}/scgi;
    upstream app {{ server 127.0.0.1:{upstream_port}; }}
    server {{
        {listen}
        {tls_lines}
        location / {{
            proxy_pass http://app;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_read_timeout {round(read_timeout_s * 1000)}ms;
            proxy_buffering {"on" if buffering else "off"};
            {"" if honour_accel_buffering else "proxy_ignore_headers X-Accel-Buffering;"}
        }}
    }}
}}
"""


class Nginx:
    name = "nginx"

    def __init__(self, upstream_port: int, tls: bool = False, http2: bool = False, read_timeout_s: float = 60.0,
                 honour_accel_buffering: bool = True, buffering: bool = True) -> None:
        self.port = free_port()
        self.prefix = Path(tempfile.mkdtemp(prefix="streamlab-nginx-"))
        self.conf = self.prefix / "nginx.conf"
        self.conf.write_text(config_text(self.port, upstream_port, self.prefix, tls, http2, read_timeout_s,
                                         honour_accel_buffering, buffering))
        self.proc: subprocess.Popen | None = None
        self._stderr = None

    def start(self) -> "Nginx":
        binary = nginx_binary()
        if binary is None:
            raise RuntimeError(nginx_unavailable())
        self._stderr = open(self.prefix / "stderr.log", "w")
        self.proc = subprocess.Popen([binary, "-p", str(self.prefix), "-c", str(self.conf), "-g", "daemon off;"],
                                     stdout=subprocess.DEVNULL, stderr=self._stderr)
        problem = wait_listening(self.proc, self.port, START_DEADLINE_S)
        if problem is None:
            return self
        tail = self.log_tail()
        self.stop()
        raise RuntimeError(f"nginx {problem}: {tail}")

    def log_tail(self, lines: int = 20) -> str:
        text = ""
        for name in ("stderr.log", "error.log"):
            path = self.prefix / name
            if path.exists():
                text += "\n".join(path.read_text().splitlines()[-lines:])
        return text

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()  # SIGTERM: nginx's fast shutdown
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        if self._stderr is not None:
            self._stderr.close()
        shutil.rmtree(self.prefix, ignore_errors=True)


if __name__ == "__main__":  # scripts/dev setup: the certificate, made once
    print(ensure_certificate()[0])
