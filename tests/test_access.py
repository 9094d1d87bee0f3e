"""Access keys and exposure: /v1/* behind a bearer key, refused before the body is read;
/debug/* and /metrics only with --debug or on the admin port; the key from the environment."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time

import openai
import pytest

from harness.live.process import free_port
from harness.clients.rawhttp import RawExchange
from streamlab.app import create_app
from streamlab.cli import build_parser, service_config
from streamlab.config import ServiceConfig
from tests.live import AppServer, running

KEY = "test-key-0123456789"
BODY = {"prompt": "Return the number", "max_new_tokens": 4, "ignore_eos": True}


async def call(port: int, path: str, body=None, headers=None, method: str = "POST") -> tuple[int, dict, dict]:
    ex = await RawExchange.open("127.0.0.1", port, method, path, body, headers=headers)
    try:
        head = await ex.read_head(10)
        raw = await ex.read_body(10)
    finally:
        ex.close_fin()
    try:
        payload = json.loads(raw)
    except ValueError:
        payload = {"raw": raw.decode(errors="replace")}
    return head.status, head.headers, payload


@pytest.fixture
def keyed(tiny):
    with running(AppServer(create_app(ServiceConfig(api_key=KEY), tiny))) as server:
        yield server


def test_v1_routes_need_the_key_and_say_so_in_our_envelope(keyed):
    async def go():
        status, headers, body = await call(keyed.port, "/v1/stream", BODY)
        assert status == 401 and headers["www-authenticate"] == "Bearer"
        assert body["error"]["type"] == "unauthorized" and "no API key" in body["error"]["message"]
        status, _, body = await call(keyed.port, "/v1/stream", BODY, {"authorization": "Bearer nope"})
        assert status == 401 and "not valid" in body["error"]["message"]
        status, _, body = await call(keyed.port, "/v1/generate", BODY, {"authorization": f"Bearer {KEY}"})
        assert status == 200 and len(body["token_ids"]) == 4
        status, _, body = await call(keyed.port, "/v1/models", None, None, "GET")
        assert status == 401 and body["error"]["code"] == "unauthorized"  # OpenAI's error object there
        status, _, _ = await call(keyed.port, "/stats", None, None, "GET")  # not under /v1: no key needed
        assert status == 200
    asyncio.run(go())


def test_a_wrong_key_is_refused_before_the_body_is_read(keyed):
    """The head says a 1 MB body follows, and none is sent: the answer comes anyway, at once."""
    with socket.create_connection(("127.0.0.1", keyed.port), timeout=5) as sock:
        sock.sendall(b"POST /v1/stream HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                     b"content-length: 1000000\r\nauthorization: Bearer wrong\r\n\r\n")
        t0 = time.monotonic()
        reply = sock.recv(65536)
        assert reply.startswith(b"HTTP/1.1 401") and time.monotonic() - t0 < 2
    assert keyed.app.state.hub.books.counters["requests_accepted"] == 0


def test_the_official_openai_client_sends_the_key(keyed):
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{keyed.port}/v1", api_key=KEY, max_retries=0)
    assert client.models.list().data[0].id == "tiny"
    out = client.completions.create(model="tiny", prompt="Return the", max_tokens=3, temperature=0)
    assert out.usage.completion_tokens >= 1
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=f"http://127.0.0.1:{keyed.port}/v1", api_key="other", max_retries=0).models.list()


@pytest.mark.parametrize("debug", [False, True])
def test_operator_routes_only_with_debug(tiny, debug):
    with running(AppServer(create_app(ServiceConfig(debug=debug), tiny))) as server:
        async def go():
            for path in ("/debug/releases", "/debug/steps", "/debug/config", "/debug/invariants", "/metrics"):
                status, _, body = await call(server.port, path, None, None, "GET")
                assert status == (200 if debug else 404), path
                if not debug:
                    assert body["error"]["type"] == "not_found"
            assert (await call(server.port, "/healthz", None, None, "GET"))[0] == 200
        asyncio.run(go())


def test_debug_config_never_shows_the_key(tiny):
    with running(AppServer(create_app(ServiceConfig(api_key=KEY, debug=True), tiny))) as server:
        status, _, body = asyncio.run(call(server.port, "/debug/config", None, None, "GET"))
        assert status == 200 and body["api_key"] == "(set)" and KEY not in json.dumps(body)


def test_the_key_comes_from_the_environment_unless_given(monkeypatch):
    parser = build_parser()
    monkeypatch.setenv("STREAMLAB_API_KEY", "from-env")
    assert service_config(parser.parse_args(["serve"])).api_key == "from-env"
    assert service_config(parser.parse_args(["serve", "--api-key", "flag"])).api_key == "flag"
    monkeypatch.delenv("STREAMLAB_API_KEY")
    assert service_config(parser.parse_args(["serve"])).api_key == ""
    assert not service_config(parser.parse_args(["serve"])).debug  # off unless asked
    assert not service_config(parser.parse_args(["serve"])).lab


def test_the_admin_port_serves_the_operator_routes_of_a_real_server(tmp_path):
    port, admin = free_port(), free_port()
    env = {**os.environ, "STREAMLAB_API_KEY": KEY}
    with open(tmp_path / "log", "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "streamlab.cli", "serve", "--model", "tiny", "--port",
                                 str(port), "--admin-port", str(admin), "--log-level", "warning"], env=env,
                                stdout=log, stderr=subprocess.STDOUT)
    try:
        async def go():
            for _ in range(300):  # bounded: 30 s for the model and both listeners
                try:
                    if (await call(admin, "/healthz", None, None, "GET"))[0] == 200:
                        break
                except OSError:
                    await asyncio.sleep(0.1)
            assert (await call(port, "/debug/releases", None, None, "GET"))[0] == 404
            assert (await call(port, "/metrics", None, None, "GET"))[0] == 404
            status, _, body = await call(port, "/v1/generate", BODY, {"authorization": f"Bearer {KEY}"})
            assert status == 200
            status, _, body = await call(admin, "/debug/releases", None, None, "GET")
            assert status == 200 and len(body["releases"]) == 1  # the same hub as the main port's
            assert (await call(admin, "/metrics", None, None, "GET"))[0] == 200
            assert (await call(admin, "/stats", None, None, "GET"))[2]["requests_accepted"] == 1
            assert (await call(admin, "/v1/generate", BODY, {"authorization": f"Bearer {KEY}"}))[0] == 404
        asyncio.run(go())
    finally:
        proc.terminate()  # uvicorn drains, then re-raises the signal it caught: exit by SIGTERM, not a crash
        assert proc.wait(timeout=30) in (0, -signal.SIGTERM), (tmp_path / "log").read_text()
