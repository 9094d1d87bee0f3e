"""Hostile HTTP against a real `streamlab serve` on loopback, over raw sockets. Every case must
end with a bounded, documented answer (a 4xx, or the connection closed after a timeout we set),
the server healthy and its books clean."""

from __future__ import annotations

import json
import resource
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from harness.live.process import free_port
from streamlab.idle import drained

HEADER_TIMEOUT_S = 1.0
BODY_TIMEOUT_S = 1.0
HELD = 2000
WAIT_S = 10.0  # the longest any case waits for an answer (every loop is bounded)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = 2 * HELD + 200  # our sockets and the server's, in the same limits (the server inherits ours)
    if hard != resource.RLIM_INFINITY and hard < need:
        pytest.skip(f"needs {need} open files, the hard limit here is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, need), hard))
    port = free_port()
    log = tmp_path_factory.mktemp("hostile") / "serve.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "streamlab.cli", "serve", "--model", "tiny", "--port",
                                 str(port), "--header-timeout", str(HEADER_TIMEOUT_S), "--body-timeout",
                                 str(BODY_TIMEOUT_S), "--debug", "--log-level", "warning"], stdout=out,
                                stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if get(port, "/healthz")[0] == 200:
                break
        except OSError:
            time.sleep(0.1)
    else:
        proc.kill()
        pytest.fail(f"streamlab serve did not start: {log.read_text()[-2000:]}")
    yield port
    proc.terminate()  # uvicorn drains, then re-raises the signal it caught
    assert proc.wait(timeout=30) in (0, -signal.SIGTERM), log.read_text()[-2000:]


def get(port: int, path: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=WAIT_S) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


_opened: list[socket.socket] = []


@pytest.fixture(autouse=True)
def close_sockets():
    yield
    while _opened:
        _opened.pop().close()


def connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=WAIT_S)
    _opened.append(sock)  # closed after the test, whatever happened
    return sock


def read_all(sock: socket.socket) -> bytes:
    """Everything until the server closes the connection (bounded by WAIT_S)."""
    out = bytearray()
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        chunk = sock.recv(65536)
        if not chunk:
            break
        out += chunk
    return bytes(out)


def assert_healthy_and_clean(port: int) -> None:
    status, health = get(port, "/healthz")
    assert status == 200 and health["status"] == "ok", health
    status, body = get(port, "/v1/models")
    assert status == 200
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        stats = get(port, "/stats")[1]
        if drained(stats):
            break
        time.sleep(0.05)
    assert stats["blocks_free"] == stats["blocks_total"] and stats["double_release_attempts"] == 0, stats
    assert (stats["running"], stats["waiting"], stats["streams_registered"]) == (0, 0, 0), stats


GOOD = json.dumps({"prompt": "Return the number", "max_new_tokens": 4}).encode()


def test_slowloris_headers_a_byte_at_a_time_get_408_after_the_header_timeout(server):
    sock = connect(server)
    head = b"POST /v1/generate HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
    t0 = time.monotonic()
    reply = b""
    for byte in head:  # one byte every 0.1 s: the whole head would take 7 s
        try:
            sock.sendall(bytes([byte]))
        except OSError:
            break
        sock.settimeout(0.1)
        try:
            reply = sock.recv(65536)
            if reply:
                break
        except TimeoutError:
            continue
    sock.settimeout(WAIT_S)
    reply += read_all(sock)
    elapsed = time.monotonic() - t0
    assert reply.startswith(b"HTTP/1.1 408") and b"header_timeout" in reply
    assert HEADER_TIMEOUT_S * 0.9 <= elapsed <= HEADER_TIMEOUT_S + 3
    assert_healthy_and_clean(server)


def test_a_keep_alive_connections_next_head_is_timed_too(server):
    sock = connect(server)
    sock.sendall(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
    first = sock.recv(65536)
    assert first.startswith(b"HTTP/1.1 200")
    sock.sendall(b"GET /hea")  # the next request's head starts, and stops
    rest = read_all(sock)
    assert b"HTTP/1.1 408" in rest and rest.count(b"HTTP/1.1") == 1
    assert_healthy_and_clean(server)


def test_a_body_slower_than_its_content_length_gets_408(server):
    sock = connect(server)
    sock.sendall(b"POST /v1/stream HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                 b"content-length: " + str(len(GOOD)).encode() + b"\r\n\r\n" + GOOD[:10])
    reply = read_all(sock)
    assert reply.startswith(b"HTTP/1.1 408") and b"body_timeout" in reply
    assert_healthy_and_clean(server)


@pytest.mark.parametrize("headers", [
    [(b"x-big", b"a" * 100_000)],  # one header of 100 KB
    [(f"x-{i}".encode(), b"v" * 8) for i in range(5000)],  # 5,000 headers: 70 KB of head
])
def test_oversized_heads_get_431_and_the_connection_closed(server, headers):
    sock = connect(server)
    head = b"GET /healthz HTTP/1.1\r\nhost: x\r\n" + b"".join(k + b": " + v + b"\r\n" for k, v in headers) + b"\r\n"
    try:
        sock.sendall(head)
    except OSError:
        pass  # the server may close before it has read it all
    assert read_all(sock).startswith(b"HTTP/1.1 431")
    assert_healthy_and_clean(server)


def test_a_large_body_in_the_same_write_as_its_head_is_not_a_large_head(server):
    """The head limit counts the head only: a 70 KB body sent with it gets the body's own 413."""
    sock = connect(server)
    body = json.dumps({"prompt": "x" * 70_000}).encode()
    sock.sendall(b"POST /v1/stream HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                 b"content-length: " + str(len(body)).encode() + b"\r\nconnection: close\r\n\r\n" + body)
    reply = read_all(sock)
    assert reply.startswith(b"HTTP/1.1 413") and b"body_too_large" in reply
    assert_healthy_and_clean(server)


def test_an_answer_given_while_the_body_still_arrives_reaches_the_client(server):
    """A 413 answered from the content-length while the client is still sending an 8 MB body
    (connection: close): the server lingers, reading and dropping the rest until the client
    closes, so the client's send completes and it reads the answer whole. Closed at once with
    unread bytes, the kernel answers with RST and drops what it had not yet sent: a CI run read
    the 70 KB body above as a reset connection, and here the send fails."""
    sock = connect(server)
    body = b'{"prompt": "' + b"x" * 8_000_000 + b'"}'
    sock.sendall(b"POST /v1/stream HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                 b"content-length: " + str(len(body)).encode() + b"\r\nconnection: close\r\n\r\n" + body)
    reply = read_all(sock)
    assert reply.startswith(b"HTTP/1.1 413") and b"body_too_large" in reply
    assert_healthy_and_clean(server)


def test_too_many_header_fields_within_the_size_limit_get_431(server):
    for count, status in ((90, b"200"), (500, b"431")):
        sock = connect(server)
        sock.sendall(b"GET /healthz HTTP/1.1\r\nhost: x\r\n" + b"".join(b"x-%d: v\r\n" % i for i in range(count)) +
                     b"connection: close\r\n\r\n")
        assert read_all(sock).startswith(b"HTTP/1.1 " + status), count
    assert_healthy_and_clean(server)


def test_bad_chunked_encoding_gets_400(server):
    sock = connect(server)
    sock.sendall(b"POST /v1/stream HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                 b"transfer-encoding: chunked\r\n\r\nzz-not-a-size\r\n{}\r\n0\r\n\r\n")
    assert read_all(sock).startswith(b"HTTP/1.1 400")
    assert_healthy_and_clean(server)


def test_pipelined_requests_are_answered_in_order(server):
    sock = connect(server)
    sock.sendall(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n"
                 b"POST /v1/generate HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                 b"content-length: " + str(len(GOOD)).encode() + b"\r\n\r\n" + GOOD +
                 b"GET /v1/models HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
    reply = read_all(sock)
    assert reply.count(b"HTTP/1.1 200") == 3
    first, second, third = (reply.index(b'"status"'), reply.index(b'"token_ids"'), reply.index(b'"object"'))
    assert first < second < third
    assert_healthy_and_clean(server)


def test_http_1_0_is_served_and_closed(server):
    sock = connect(server)
    sock.sendall(b"GET /healthz HTTP/1.0\r\n\r\n")
    reply = read_all(sock)  # ends: HTTP/1.0 closes after one response
    assert reply.startswith(b"HTTP/1.1 200") and b'"status"' in reply


def test_expect_100_continue_gets_continue_before_the_body(server):
    sock = connect(server)
    sock.sendall(b"POST /v1/generate HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                 b"expect: 100-continue\r\ncontent-length: " + str(len(GOOD)).encode() + b"\r\n\r\n")
    assert sock.recv(65536).startswith(b"HTTP/1.1 100")
    sock.sendall(GOOD)
    sock.settimeout(WAIT_S)
    reply = sock.recv(65536)
    assert reply.startswith(b"HTTP/1.1 200")
    assert_healthy_and_clean(server)


@pytest.mark.parametrize("line,status", [(b"HELLO WORLD\r\n\r\n", b"400"),
                                         (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 40, b"400"),
                                         (b"GET / HTTP/9.9\r\nconnection: close\r\n\r\n", b"505")])
def test_a_garbage_request_line_gets_4xx_or_505(server, line, status):
    sock = connect(server)
    sock.sendall(line)
    assert read_all(sock).startswith(b"HTTP/1.1 " + status)
    assert_healthy_and_clean(server)


def test_two_thousand_idle_connections_are_held_then_closed_and_the_server_serves_meanwhile(server):
    before = get(server, "/debug/sizes")[1]["open_fds"]
    held = []
    for _ in range(HELD):  # opened at once, no byte sent
        s = socket.socket()
        s.setblocking(True)
        s.settimeout(WAIT_S)
        s.connect(("127.0.0.1", server))
        held.append(s)
    t0 = time.monotonic()
    status, _ = get(server, "/v1/models")  # a real client is still served while they are held
    assert status == 200
    sizes = get(server, "/debug/sizes")[1]
    assert sizes["open_fds"] >= before + HELD * 0.9  # they really are open on the server
    closed = 0
    for s in held:  # each gets the 408 and is closed once the header timeout passes
        s.settimeout(max(0.1, t0 + HEADER_TIMEOUT_S + WAIT_S - time.monotonic()))
        try:
            data = s.recv(4096)
            closed += data.startswith(b"HTTP/1.1 408") or data == b""
        except OSError:
            closed += 1
        s.close()
    assert closed == HELD
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline and get(server, "/debug/sizes")[1]["open_fds"] > before + 10:
        time.sleep(0.1)
    assert get(server, "/debug/sizes")[1]["open_fds"] <= before + 10
    assert_healthy_and_clean(server)
