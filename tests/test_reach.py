"""A server on another host, by its owner's consent, over TLS (harness.machine.reach).

127.0.0.2 stands in for a remote host: it is not this machine's 127.0.0.1, so the harness aims at
it only with consent, and our server there speaks https with a certificate for that address,
signed by a CA the test makes. Traffic goes nowhere but 127.0.0.1 and 127.0.0.2."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from harness.machine import reach
from harness.clients.rawhttp import RawExchange
from harness.format.load import ScenarioError, load
from harness.format.target import Target, resolve_target
from harness.live.backend import live_unavailable
from harness.run.runner import RunContext, run_scenario
from streamlab.app import create_app
from streamlab.config import ServiceConfig
from tests.live import AppServer, running

REMOTE = "127.0.0.2"  # loopback, but not this machine's own address: a stand-in for another host

SCENARIO = """\
name: remote
description: readers and RST droppers against a server on another host, over TLS, through Toxiproxy
modes: [live]
seed: 3
target: {{url: "{url}", ca_file: "{ca}", api: streamlab, profile: streamlab}}
server: {{model: tiny, max_batch: 8}}
groups:
  - name: readers
    count: 3
    prompt: {{tokens: [8, 16]}}
    request: {{max_new_tokens: 24}}
    behaviour: {{kind: reader}}
  - name: droppers
    count: 3
    prompt: {{tokens: [8, 16]}}
    request: {{max_new_tokens: 200}}
    behaviour: {{kind: dropper, after_tokens: 6, close: rst}}
expect:
  finish_reasons: {{readers: {{length: 3}}, droppers: {{client_left: 3}}}}
  release_within: {{steps: 2, seconds: 2.0}}
"""


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def certificates(tmp_path_factory) -> dict[str, str]:
    """A CA of the test's own and a server certificate for 127.0.0.2 (its IP in subjectAltName)."""
    d = tmp_path_factory.mktemp("tls")
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
             "-subj", "/CN=streamlab test CA", "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign", cwd=d)
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr",
             "-subj", f"/CN={REMOTE}", cwd=d)
    (d / "ext").write_text(f"subjectAltName=IP:{REMOTE}\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n")
    _openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
             "-out", "server.pem", "-days", "2", "-extfile", "ext", cwd=d)
    return {"ca": str(d / "ca.pem"), "cert": str(d / "server.pem"), "key": str(d / "server.key")}


@pytest.mark.shares_cores
def test_another_host_is_refused_without_consent_saying_how_to_consent(monkeypatch):
    monkeypatch.delenv(reach.ENV, raising=False)
    for url in (f"http://{REMOTE}:8000", "https://staging.example:8443"):
        with pytest.raises(ValueError, match=r"--allow-remote (127\.0\.0\.2|staging\.example)"):
            resolve_target(url)
    assert reach.refusal("127.0.0.1") is None and reach.refusal("localhost") is None and reach.refusal("::1") is None
    with pytest.raises(PermissionError, match="allow-remote"):  # the guard every connection passes, not only targets
        asyncio.run(RawExchange.open(REMOTE, 9, "GET", "/"))
    reach.consent([REMOTE])
    assert resolve_target(f"https://{REMOTE}:8443").origin.tls is not None  # https: verified by default
    assert reach.refusal("staging.example") is not None  # consent names hosts, not everything
    with pytest.raises(ValueError, match="https"):
        resolve_target(f"http://{REMOTE}:8000", ca_file="ca.pem")
    with pytest.raises(ValueError, match="not both"):
        Target(name="x", url=f"https://{REMOTE}:1", profile="generic", api="openai-completions", ca_file="x",
               insecure=True)
    with pytest.raises(ValueError, match="expected http"):
        resolve_target(f"ftp://{REMOTE}:21")


def test_the_cli_refuses_another_host_before_any_traffic_and_says_how(monkeypatch):
    monkeypatch.delenv(reach.ENV, raising=False)
    done = subprocess.run([sys.executable, "-m", "streamlab.cli", "scenario", "run", "scenarios/overlap_2.yaml",
                           "--target", f"https://{REMOTE}:9"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"--allow-remote {REMOTE}" in done.stdout + done.stderr


@pytest.mark.skipif(live_unavailable() is not None, reason=str(live_unavailable()))
def test_a_server_on_another_host_over_tls_passes_its_checks_with_consent(tmp_path, tiny, certificates,
                                                                          monkeypatch):
    monkeypatch.delenv(reach.ENV, raising=False)
    server = AppServer(create_app(ServiceConfig(debug=True), tiny), host=REMOTE,
                       tls=(certificates["cert"], certificates["key"]))
    with running(server):
        path = tmp_path / "remote.yaml"
        path.write_text(SCENARIO.format(url=server.url, ca=certificates["ca"]))
        with pytest.raises(ScenarioError, match=rf"remote.yaml:\d+: target: .*--allow-remote {REMOTE}"):
            load(path)
        reach.consent([REMOTE])
        scenario = load(path)
        ctx = RunContext(results_dir=None)
        try:
            outcome = run_scenario(scenario, "live", ctx)
        finally:
            ctx.close()
        print("\n".join(c.line() for c in outcome.checks))
        failed = [c.line() for c in outcome.checks if not c.ok]
        assert not failed, failed
        got = {c.name: c for c in outcome.checks}
        assert got["release_within"].observed and got["leak_free"].observed and got["exactly_once"].observed

        # Verified by default: without the test's CA the certificate is refused, in words.
        plain = scenario.model_copy(update={"target": scenario.target.model_copy(update={"ca_file": None})})
        ctx = RunContext(results_dir=None)
        try:
            with pytest.raises(Exception, match="CERTIFICATE_VERIFY_FAILED"):
                run_scenario(plain, "live", ctx)
        finally:
            ctx.close()


SHARED = """\
name: shared
description: a sharded run's workers reach a server on another host through Toxiproxies of their own
modes: [live]
seed: 5
target: {{url: "{url}", ca_file: "{ca}", api: streamlab, profile: streamlab}}
server: {{model: tiny, max_batch: 8}}
groups:
  - name: far
    count: 4
    prompt: {{tokens: [8, 16]}}
    request: {{max_new_tokens: 16}}
    behaviour: {{kind: reader}}
    network: {{toxics: [{{type: latency, latency_ms: 150}}]}}
  - name: droppers
    count: 4
    prompt: {{tokens: [8, 16]}}
    request: {{max_new_tokens: 200}}
    behaviour: {{kind: dropper, after_tokens: 6, close: rst}}
expect:
  finish_reasons: {{far: {{length: 4}}, droppers: {{client_left: 4}}}}
  release_within: {{steps: 2, seconds: 2.0}}
"""


@pytest.mark.skipif(live_unavailable() is not None, reason=str(live_unavailable()))
def test_sharded_workers_reach_a_shared_target_through_toxiproxies_of_their_own(tmp_path, tiny, certificates,
                                                                                 monkeypatch):
    from harness.live.shards import Sharding, sharding_unavailable

    if sharding_unavailable():
        pytest.skip(sharding_unavailable())
    import ray

    monkeypatch.delenv(reach.ENV, raising=False)
    server = AppServer(create_app(ServiceConfig(debug=True), tiny), host=REMOTE,
                       tls=(certificates["cert"], certificates["key"]))
    with running(server):
        path = tmp_path / "shared.yaml"
        path.write_text(SHARED.format(url=server.url, ca=certificates["ca"]))
        reach.consent([REMOTE])
        ctx = RunContext(results_dir=None, sharding=Sharding(2))
        try:
            outcome = run_scenario(load(path), "live", ctx)
        finally:
            ctx.close()
            ray.shutdown()  # the local cluster's daemons must not outlive the test beside timed ones
    failed = [c.line() for c in outcome.checks if not c.ok]
    assert not failed, failed
    workers = outcome.trace.workers
    assert [w["clients"] for w in workers] == [4, 4], workers
    assert all(w["via"] == f"its own Toxiproxy to {REMOTE}:{server.port}" for w in workers), workers
    # the far group's toxic was applied on the workers' proxies: its first token a latency later
    far = [s.token_times[0] - s.sent_at for s in outcome.trace.group("far")]
    assert min(far) >= 0.15, far
