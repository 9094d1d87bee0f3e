"""Who may call which route: the access key for /v1/*, and where the operator's routes are served.

A plain ASGI middleware in front of the app, so a refusal goes out before the request body is
read and before any route runs:
- With an API key set, every /v1/* request needs `Authorization: Bearer <key>` (what OpenAI's
  clients send); a missing or wrong key gets 401 with `WWW-Authenticate: Bearer` and the error
  envelope of the route's family (ours, or OpenAI's error object on the OpenAI routes).
- /debug/* and /metrics are served only with `--debug`, or on the admin port; elsewhere they
  answer 404 as if they did not exist. The admin port serves only those, /stats and /healthz.
- A request with more than `max_headers` header fields gets 431, and an HTTP version other
  than 1.0 or 1.1 gets 505 (h11 parses any HTTP/x.y and would serve it as 1.1).
"""

from __future__ import annotations

import hmac
import json

from streamlab.openai_api import error_payload

OPERATOR_PREFIXES = ("/debug/", "/metrics")
ADMIN_ALSO = ("/stats", "/healthz")


def is_operator_path(path: str) -> bool:
    return path.startswith(OPERATOR_PREFIXES)


class AccessGuard:
    def __init__(self, app, api_key: str = "", debug: bool = False, admin_port: int = 0,
                 max_headers: int = 100) -> None:
        self.app = app
        self.max_headers = max_headers
        self.expected = f"Bearer {api_key}".encode() if api_key else None
        self.debug = debug
        self.admin_port = admin_port

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        if scope.get("http_version") not in ("1.0", "1.1", "2"):  # h11 parses any HTTP/x.y
            await _refuse(scope, send, 505, "http_version_not_supported", "HTTP/1.0 and HTTP/1.1 only")
            return
        if len(scope.get("headers") or ()) > self.max_headers:
            await _refuse(scope, send, 431, "too_many_headers", f"at most {self.max_headers} header fields")
            return
        on_admin = bool(self.admin_port) and (scope.get("server") or (None, None))[1] == self.admin_port
        if on_admin and not (is_operator_path(path) or path in ADMIN_ALSO):
            await _refuse(scope, send, 404, "not_found", "the admin port serves /debug/*, /metrics, /stats and /healthz")
            return
        if is_operator_path(path) and not (self.debug or on_admin):
            await _refuse(scope, send, 404, "not_found", "Not Found")
            return
        if self.expected is not None and path.startswith("/v1/") and not on_admin:
            given = dict(scope.get("headers") or ()).get(b"authorization", b"")
            if not hmac.compare_digest(given, self.expected):  # constant time: the key is not guessable by timing
                why = "no API key was given" if not given else "the API key is not valid"
                await _refuse(scope, send, 401, "unauthorized", f"{why}: send Authorization: Bearer <key>",
                              [(b"www-authenticate", b"Bearer")])
                return
        await self.app(scope, receive, send)


async def _refuse(scope, send, status: int, error_type: str, message: str,
                  headers: list[tuple[bytes, bytes]] | None = None) -> None:
    hub = (scope.get("state") or {}).get("hub")
    if hub is not None:
        hub.books.counters["requests_refused"] += 1
    body = json.dumps(error_payload(scope["path"], error_type, message, status)).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            *(headers or [])]})
    await send({"type": "http.response.body", "body": body})
