"""`streamlab target probe` (harness.targets.probe) against our own server's OpenAI routes: what it
finds, and that the profile it writes is one a target takes. The real peers: tests/test_targets.py."""

from __future__ import annotations

import subprocess
import sys

from harness.format.profile import PROFILES
from harness.format.target import resolve_target
from harness.targets.probe import library_refusals, probe
from streamlab.app import create_app
from streamlab.config import ServiceConfig
from tests.live import AppServer, running


def test_the_probe_finds_what_our_server_shows_and_writes_a_profile_a_target_takes(tiny, tmp_path):
    with running(AppServer(create_app(ServiceConfig(debug=True), tiny))) as server:
        report = probe(server.url)
        done = subprocess.run([sys.executable, "-m", "streamlab.cli", "target", "probe", server.url, "--write",
                               str(tmp_path / "ours.yaml")], capture_output=True, text=True, timeout=120)
    assert report.model == "tiny" and report.routes["/healthz"] == 200 and report.routes["/v1/models"] == 200
    assert report.stream["token_ids"] and report.stream["usage"] and report.stream["finish_reason"] == "length"
    profile = report.profile
    assert profile.health_path == "/health" and profile.request_extra == {"return_token_ids": True}
    assert profile.gauges is not None and profile.gauges.running == "streamlab_running"  # /metrics with debug
    assert profile.counters.generated_tokens == "streamlab_tokens_generated_total"
    assert profile.counters.finished == PROFILES["streamlab"].counters.finished  # finished_once observable
    assert profile.fields == PROFILES["streamlab"].fields  # ids in choices[].token_ids, usage at usage
    # Each bad request is refused as the library expects on our /v1/stream, but for the lab field,
    # which the OpenAI routes refuse as an unknown one: the one convention mapped.
    expected = library_refusals()
    assert {k for k, got in report.refusals.items() if got != expected[k]} == {"lab_option"}
    assert profile.refusals == {"lab_option": (422, "invalid_request")} and not report.findings
    assert done.returncode == 0, done.stdout + done.stderr
    assert "leak_free" in done.stdout and "observable" in done.stdout
    written = resolve_target(server.url, profile=str(tmp_path / "ours.yaml")).profile_spec
    assert written.gauges == profile.gauges and written.refusals == profile.refusals
