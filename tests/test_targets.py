"""Target mode: metric parsing for every profile, the wires, a stub target that leaks (the checks
must catch it), our own OpenAI routes giving the native route's verdicts, and the real peer."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from harness.cores_lock import hold_machine
from harness.targets.engines import binaries_missing
from harness.live.backend import live_unavailable
from harness.run.runner import RunContext, refused_here, run_scenario
from harness.format.scenario import Scenario
from harness.format.load import load_by_name
from harness.judge.registry import BY_NAME, unobservable
from harness.format.profile import PROFILES
from harness.format.target import TARGETS, Target, resolve_target
from harness.targets.findings import FINDINGS, FRESH_SERVER, ROUTE_SCENARIOS, UNSETTLED
from harness.targets.gauges import read_gauges
from harness.clients.wire import OpenAIWire
from streamlab.sse import SSEParser
from tests.live import AppServer, running
from tests.peers import missing_peer
from tests.stub_target import stub_app

FIXTURES = Path(__file__).parent / "fixtures" / "targets"

# profile -> (fixture, running, waiting, cache_in_use), label sets summed. A fixture named with a
# version was scraped from that server running here (llama.cpp: three streams on two slots;
# vLLM: four on two sequences);
# the others were written from the project's documented format.
PARSED = {
    "vllm": ("vllm-0.32.0.prom", 2.0, 2.0, 0.0007328691828508704),
    "tgi": ("tgi.prom", 4.0, 1.0, None),
    "sglang": ("sglang.prom", 5.0, 7.0, 0.28),
    "llamacpp": ("llamacpp-b11434.prom", 2.0, 1.0, None),
    "llamacpp-slots": ("llamacpp_slots-b11434.json", 2.0, None, None),
}


@pytest.mark.parametrize("profile", sorted(PARSED))
def test_each_profile_reads_its_servers_metrics(profile):
    fixture, running_, waiting, cache = PARSED[profile]
    reading = read_gauges((FIXTURES / fixture).read_bytes(), PROFILES[profile].gauges)
    assert (reading.running, reading.waiting, reading.cache_in_use) == (running_, waiting, cache)
    assert reading.is_idle() is False


def test_the_token_counters_of_the_peers_run_here_read_from_their_scraped_metrics():
    from harness.targets.gauges import prometheus_samples, series_sum

    for profile, fixture, expected in (("vllm", "vllm-0.32.0.prom", 37.0), ("llamacpp", "llamacpp-b11434.prom", 0.0)):
        samples = prometheus_samples((FIXTURES / fixture).read_bytes())
        assert series_sum(samples, PROFILES[profile].counters.generated_tokens) == expected, profile


def test_every_profile_with_gauges_has_a_parsing_test():
    with_gauges = {name for name, p in PROFILES.items() if p.gauges is not None}
    assert with_gauges - {"streamlab"} == set(PARSED)  # streamlab's: read live below


def test_streamlab_profile_reads_our_own_metrics(tiny):
    from tests.live import live_server
    from streamlab.config import ServiceConfig

    with live_server(ServiceConfig(), tiny) as server:
        async def body():
            ex = await server.request("GET", "/metrics")
            try:
                return await ex.read_body()
            finally:
                ex.close_fin()
        reading = read_gauges(asyncio.run(body()), PROFILES["streamlab"].gauges)
    assert (reading.running, reading.waiting, reading.cache_in_use) == (0.0, 0.0, 0.0) and reading.is_idle()


def test_targets_resolve_and_refuse_what_is_not_loopback():
    assert resolve_target(None) == TARGETS["streamlab"] and TARGETS["streamlab"].default
    assert resolve_target("streamlab-openai").api == "openai-completions"
    url = resolve_target("http://127.0.0.1:8000", profile="vllm")
    assert (url.url, url.origin.port, url.profile, url.api) == ("http://127.0.0.1:8000", 8000, "vllm",
                                                                "openai-completions")
    with pytest.raises(ValueError, match="loopback"):
        Target(name="x", url="http://10.0.0.1:8000", profile="generic", api="openai-completions")
    with pytest.raises(ValueError, match="unknown target"):
        resolve_target("vllm-somewhere")
    with pytest.raises(ValueError, match="unknown profile"):
        Target(name="x", url="http://127.0.0.1:1", profile="nope", api="openai-completions")
    with pytest.raises(ValueError, match="serves"):  # a running server serves what it serves
        Target(name="x", url="http://127.0.0.1:1", profile="vllm", api="openai-completions", serves="stdlib-small")
    vllm = TARGETS["vllm"]  # tiny's head size (16) is below what vLLM's CPU attention runs
    assert vllm.serves == "stdlib-small" and vllm.uses("vllm") and vllm.env["VLLM_TARGET_DEVICE"] == "cpu"


def test_openai_wire_reads_chunks_cut_anywhere():
    wire = OpenAIWire("m", extra={"return_token_ids": True})
    raw = (b'data: {"id":"cmpl-1","choices":[{"index":0,"text":"He","token_ids":[5],"finish_reason":null}]}\n\n'
           b'data: {"id":"cmpl-1","choices":[{"index":0,"text":"","token_ids":[6],"finish_reason":null}]}\n\n'
           b'data: {"id":"cmpl-1","choices":[{"index":0,"text":"llo","token_ids":[],"finish_reason":"length"}]}\n\n'
           b'data: {"id":"cmpl-1","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}\n\n'
           b"data: [DONE]\n\n")

    class Rec:
        request_id = start_at = prompt_tokens = finish = ended_at = None
        text = ""

        def __init__(self):
            self.token_times, self.token_ids, self.event_ids = [], [], []
    for cut in range(1, len(raw), 37):
        rec, parser, tokens = Rec(), SSEParser(), 0
        for piece in (raw[:cut], raw[cut:]):
            tokens += sum(wire.note(rec, ev, 1.0) for ev in parser.feed(piece))
        assert (rec.text, rec.token_ids, rec.finish, rec.prompt_tokens) == ("Hello", [5, 6], "length", 3)
        assert tokens == 3 and rec.request_id == "cmpl-1"
    body = wire.body("p", {"max_new_tokens": 4, "temperature": 0.0, "top_k": 0, "top_p": 1.0, "stop": [],
                           "ignore_eos": True})
    assert body["stream"] and body["return_token_ids"] and body["ignore_eos"] and body["max_tokens"] == 4


# ---- a stub target: the checks must see a leak from outside ----

def stub_scenario(url: str) -> Scenario:
    return Scenario.model_validate({
        **stub_spec(),
        "target": {"name": "stub", "url": url, "profile": "vllm", "api": "openai-completions", "probe_clients": 4}})


def stub_spec() -> dict:
    return {
        "name": "stub_droppers", "seed": 7, "modes": ["live"],
        "server": {"model": "tiny", "max_batch": 4},
        "groups": [
            {"name": "readers", "count": 2, "request": {"max_new_tokens": 20}, "behaviour": {"kind": "reader"}},
            {"name": "droppers", "count": 4, "request": {"max_new_tokens": 200},
             "behaviour": {"kind": "dropper", "after_tokens": 3, "close": "rst"}}],
        "expect": {"finish_reasons": {"readers": {"length": 2}, "droppers": {"client_left": 4}},
                   "release_within": {"steps": 1, "seconds": 0.25}},
        "drain_s": 1.0}


needs_toxiproxy = pytest.mark.skipif(live_unavailable(target=TARGETS["streamlab-openai"]) is not None,
                                     reason="toxiproxy-server is not installed: run `scripts/dev setup`")


@needs_toxiproxy
@pytest.mark.parametrize("leak", [False, True])
def test_a_stub_that_never_lowers_running_fails_leak_free_and_capacity(leak):
    with running(AppServer(stub_app(slots=6, leak=leak))) as stub:
        outcome = run_scenario(stub_scenario(stub.url), "live", RunContext(results_dir=None))
    checks = {c.name: c for c in outcome.checks}
    assert outcome.trace.mode == "live@stub"
    assert checks["finish_reasons"].passed and checks["identity"].passed and checks["healthy"].passed
    assert checks["exactly_once"].passed is None
    for name in ("leak_free", "release_within", "capacity_restored"):
        assert checks[name].passed is (not leak), checks[name].line()
    if leak:
        assert "running still 4" in " ".join(checks["leak_free"].details)
        assert "2/4 probe requests completed" in " ".join(checks["capacity_restored"].details)


@needs_toxiproxy
def test_a_targets_failed_timing_verdict_is_judged_again_on_another_run(monkeypatch):
    """The re-run rule (harness.judge.timing.wants_again) holds for another server's runs as for
    ours: a timing verdict failed on the first run gets another back-to-back run, judged on both."""
    from harness.judge import timing
    from harness.record.verdict import CheckResult

    judged, real = [], timing.judge

    def judge(scenario, runs, *args, **kwargs):
        judged.append(len(runs))
        first = len(runs) == 1  # a latency figure out on the first run alone, as noise would put it
        return real(scenario, runs, *args, **kwargs) + [CheckResult("latency", not first, "stub", "stub")]
    monkeypatch.setattr(timing, "judge", judge)
    with running(AppServer(stub_app(slots=6))) as stub:
        outcome = run_scenario(stub_scenario(stub.url), "live", RunContext(results_dir=None))
    assert outcome.trace.mode == "live@stub"
    assert judged == [1, 2] and len(outcome.runs) == 2
    assert next(c for c in outcome.checks if c.name == "latency").passed


# A plain `pip install streamlab`: every import of our engine's packages (the `engine` extra) and
# of the test extra's fails, as where they were never installed.
NO_ENGINE = """
import importlib.abc, sys
EXTRAS = {"torch", "transformers", "safetensors", "gguf", "h2", "httpx", "httpx_sse", "openai", "playwright",
          "hypothesis"}
class NoEngine(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.partition(".")[0] in EXTRAS:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, NoEngine())
"""


@needs_toxiproxy
def test_target_mode_runs_without_our_engine(tmp_path):
    """`scenario run FILE --target URL` with torch unimportable (README, target mode): the run
    and its checks complete (identity by the target's own solo runs); a simulation says what is
    missing, before any work, and so does `streamlab serve`."""
    import os
    import subprocess
    import sys

    import yaml

    (tmp_path / "sitecustomize.py").write_text(NO_ENGINE)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    path = tmp_path / "stub_droppers.yaml"
    path.write_text(yaml.safe_dump(stub_spec()))

    def streamlab(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "streamlab.cli", *args], env=env, capture_output=True,
                              text=True, timeout=300, cwd=tmp_path)
    with running(AppServer(stub_app(slots=6))) as stub:
        run = streamlab("scenario", "run", str(path), "--target", stub.url, "--target-profile", "vllm",
                        "--target-api", "openai-completions")
    assert run.returncode == 0, run.stdout + run.stderr
    for check in ("finish_reasons", "identity", "leak_free", "release_within", "capacity_restored"):
        assert f"ok {check}:" in run.stdout, run.stdout
    assert "No module named" not in run.stdout + run.stderr
    both = tmp_path / "both" / path.name
    both.parent.mkdir()
    both.write_text(yaml.safe_dump({**stub_spec(), "modes": ["sim", "live"]}))
    simulated = streamlab("scenario", "run", str(both))
    assert simulated.returncode == 2 and "streamlab[engine]" in simulated.stdout, simulated.stdout + simulated.stderr
    served = streamlab("serve", "--model", "tiny")
    assert served.returncode == 2 and "streamlab[engine]" in served.stderr, served.stderr


@needs_toxiproxy
def test_no_check_passes_what_the_target_cannot_show():
    with running(AppServer(stub_app(slots=6, leak=True))) as stub:
        scenario = stub_scenario(stub.url)
        scenario.target = scenario.target.model_copy(update={"profile": "generic"})
        outcome = run_scenario(scenario, "live", RunContext(results_dir=None))
    checks = {c.name: c for c in outcome.checks}
    for name in ("leak_free", "exactly_once", "release_within", "healthy"):
        assert checks[name].passed is None and checks[name].verdict == "not observable", checks[name].line()
    assert checks["capacity_restored"].passed is False  # observable on any target: the leak shows here


# ---- what of a scenario another server can run (harness.targets.scope) ----

def test_a_target_runs_every_group_it_can_and_leaves_out_our_servers_own():
    from harness.format.scenario import SCENARIOS_DIR
    from harness.format.load import load
    from harness.targets.scope import for_target, scenario_refused

    def kept(name):
        scenario, notes = for_target(load_by_name(name), TARGETS["llamacpp"])
        return [g.name for g in scenario.groups], notes
    assert kept("overlap_8") == (["streams"], [])
    groups, notes = kept("slow_reader_drop_1")  # the drop policy's slow_client is ours
    assert groups == ["healthy"] and "slow_client" in notes[0]
    groups, notes = kept("resume_reconnect")
    assert groups == ["readers", "leavers"] and "Last-Event-ID" in notes[0]
    groups, notes = kept("access_key")
    assert groups == ["keyed"] and len(notes) == 2
    narrowed, _ = for_target(load_by_name("proxy_nginx"), TARGETS["vllm"])  # its droppers ask past 256
    assert narrowed.expect.release_within is None and load_by_name("proxy_nginx").expect.release_within
    groups, notes = kept("proxy_idle_silent")  # its waiter is cut behind the slot our resume window keeps
    assert groups == ["holder"] and "resume window" in notes[0]
    # vLLM serves stdlib-small (256 positions): a 300-token blocker is left out, and its joiners with it
    assert "blocker: asks for up to 356 tokens, past the 256 positions of stdlib-small" in \
        scenario_refused(load_by_name("disconnect_rst_waiting"), TARGETS["vllm"])
    assert "droppers: joins blocker, which is not run" in scenario_refused(load_by_name("disconnect_rst_waiting"),
                                                                           TARGETS["vllm"])
    assert scenario_refused(load_by_name("disconnect_rst_waiting"), TARGETS["llamacpp"]) is None  # tiny: 1024
    assert "negative control" in scenario_refused(load_by_name("write_only_response"))
    assert "engine faults" in scenario_refused(load_by_name("engine_fault_step"))
    assert scenario_refused(load_by_name("bad_requests")) is None
    for path in sorted(SCENARIOS_DIR.glob("*.yaml")):  # every narrowed scenario is a valid one
        scenario = load(path)
        if scenario_refused(scenario) is None:
            narrowed, _ = for_target(scenario)
            assert narrowed.groups and set(narrowed.expect.finish_reasons) <= {g.name for g in narrowed.groups}


def test_a_session_on_a_target_skips_what_it_cannot_run_and_notes_what_it_leaves_out():
    from harness.run.runner import target_refused

    ctx = RunContext(results_dir=None, target=TARGETS["llamacpp"])
    assert "negative control" in target_refused(load_by_name("write_only_response"), "live", ctx)
    assert target_refused(load_by_name("write_only_response"), "sim", ctx) is None  # a simulation is ours
    ours = RunContext(results_dir=None, target=TARGETS["streamlab-openai"])
    assert target_refused(load_by_name("write_only_response"), "live", ours) is None  # our server, another route


# ---- our own OpenAI route: the same verdicts as the native route ----

@pytest.mark.parametrize("name", ROUTE_SCENARIOS)
def test_our_openai_route_gives_the_native_routes_verdicts(name):
    scenario = load_by_name(name)
    if live_unavailable(scenario, TARGETS["streamlab-openai"]):
        pytest.skip(live_unavailable(scenario, TARGETS["streamlab-openai"]))
    for pair in range(2):
        native = run_scenario(scenario, "live", RunContext(results_dir=None))
        ctx = RunContext(results_dir=None, target=TARGETS["streamlab-openai"])
        openai = run_scenario(scenario, "live", ctx)
        verdicts = {c.name: c.ok for c in native.checks if c.name != "parity"}
        # capacity_restored and finished_once are a target's only (its probes; its counters over the run).
        theirs = {c.name: c.ok for c in openai.checks if c.name not in ("capacity_restored", "finished_once", "parity")}
        # The latency gate against committed baselines exists for the native route only.
        verdicts.pop("regression", None)
        differing = {k for k in verdicts.keys() | theirs.keys() if verdicts.get(k) != theirs.get(k)}
        # The two routes are two live runs: a timing verdict that differs is judged on a second
        # pair, as the re-run rule judges any live timing verdict (harness.judge.timing). A CI run read
        # overlap_8's gap bound failing on the OpenAI route only (in each of its own runs) on a
        # machine that moved 1.4-1.6x within minutes; here the two routes read 1.65x and 2.3x of
        # overlap_1's gap against the bound's 4x. Any other verdict must agree at once.
        if pair == 0 and differing and all(BY_NAME[k].timing for k in differing):
            continue
        break
    assert theirs == verdicts, [c.line() for c in openai.checks + native.checks if c.name in differing]
    assert all(c.observed for c in openai.checks), "our own server: every check observable"
    counted = next(c for c in openai.checks if c.name == "finished_once")
    assert counted.ok and counted.compared == 3, counted.line()  # length, stop and the total: its counters


# ---- the real peers: transformers serve --continuous-batching, llama.cpp's llama-server ----

REAL_PEERS = ["transformers-serve", "llamacpp", "vllm"]


def _peer_runs() -> list:
    """(peer, scenario) for the whole library on each real peer, in the order that starts each
    peer's server once per kind (RunContext.run_order), as the suite runs them."""
    from harness.targets_report import scenarios_for

    runs = []
    for peer in REAL_PEERS:
        ctx = RunContext(results_dir=None, target=TARGETS[peer])
        for scenario in ctx.run_order([load_by_name(n) for n in scenarios_for(peer)]):
            runs.append(pytest.param(peer, scenario.name, id=f"{peer}-{scenario.name}"))
        # Last, on the server the library left (no start of its own), since it sends the empty
        # prompt that crashes transformers serve's worker.
        runs.append(pytest.param(peer, PROBE, id=f"{peer}-{PROBE}"))
    return runs


PROBE = "probe"  # `streamlab target probe` on the peer, not a scenario


def _probe_peer(peer: str, ctx: RunContext) -> None:
    """The probe's profile, used as it is, observes at least what the built-in one does; the
    gauges and counters it found are the built-in's names."""
    from harness.targets.probe import probe, profile_yaml

    scenario = load_by_name("overlap_2")
    origin, model = ctx.backends[ctx.live_mode(scenario)].server_for(scenario)
    report = probe(f"http://{origin.authority}", model=model)
    print(profile_yaml(report.profile), report.findings)
    built_in = TARGETS[peer].profile_spec
    lost = set(unobservable(report.profile)) - set(unobservable(built_in))
    assert not lost, f"observable with the built-in {peer} profile, not with the probed one: {sorted(lost)}"
    for kind in ("running", "waiting", "cache_in_use"):
        mine = getattr(built_in.gauges, kind) if built_in.gauges else None
        if mine:
            assert getattr(report.profile.gauges, kind) == mine, (kind, report.series)
    assert report.profile.token_ids == built_in.token_ids and report.stream["finish_reason"] is not None
    for kind, answer in built_in.refusals.items():  # the conventions the built-in maps, found by asking
        if kind in report.refusals:
            assert tuple(report.profile.refusals.get(kind, ())) == tuple(answer), (kind, report.refusals[kind])


@pytest.fixture(scope="module")
def peer_sessions():
    """One session per peer for the module, as a suite has: its server is started once and kept
    across the scenarios (harness.live.backend.LiveBackend), then stopped here."""
    sessions: dict[str, RunContext] = {}

    def session(peer: str) -> RunContext:
        # One peer's server at a time: transformers serve's model process holds 6.6 GB here, and the
        # items run peer by peer (_peer_runs), so the one before is stopped when the next begins.
        for other in [p for p in sessions if p != peer]:
            sessions.pop(other).close()
        return sessions.setdefault(peer, RunContext(results_dir=None, target=TARGETS[peer]))
    with hold_machine():  # a kept peer server idles between items: no other worker's timed run beside it
        try:
            yield session
        finally:
            for ctx in sessions.values():
                ctx.close()


@pytest.mark.slow
@pytest.mark.parametrize("peer,name", _peer_runs())
def test_a_real_peer_through_toxiproxy(peer, name, peer_sessions):
    """Every library scenario a peer can run (harness.targets.scope), through Toxiproxy: each
    check holds, is not observable there, or fails as an asserted finding."""
    missing = binaries_missing(TARGETS[peer].uses)
    if missing:
        missing_peer(missing)
    if name == PROBE:
        return _probe_peer(peer, peer_sessions(peer))
    scenario = load_by_name(name)
    reason = refused_here(scenario, "live", peer_sessions(peer))
    if reason:
        pytest.skip(reason)
    if (peer, name) in FRESH_SERVER:  # the finding needs a server that served nothing before
        peer_sessions(peer).close()
    outcome = run_scenario(scenario, "live", peer_sessions(peer))
    findings = FINDINGS.get((peer, name), {})
    got = {c.name: c for c in outcome.checks}
    for check in outcome.checks:
        if check.name in UNSETTLED.get((peer, name), {}):
            print(f"{peer} {name} {check.line()} (unsettled: reported, not asserted)")
        elif not check.observed:  # the profile cannot show it, or the run gave it nothing to compare
            assert check.name in unobservable(TARGETS[peer].profile_spec) or check.compared == 0, check.line()
        elif check.name in findings:
            assert not check.passed, f"{check.name} held on the peer; the finding {findings[check.name]!r} is stale"
        else:
            assert check.ok, check.line()
    assert got["capacity_restored"].observed and got["healthy"].observed


# llama-server's gauges written by hand, as a user whose server the built-in profiles do not name would.
BY_HAND = {"name": "llama-server by hand", "description": "its /metrics, as read from a scrape",
           "gauges": {"running": "llamacpp:requests_processing", "waiting": "llamacpp:requests_deferred"}}


@pytest.mark.slow
def test_an_inline_profile_written_by_hand_observes_what_generic_cannot_on_llama_server():
    missing = binaries_missing(TARGETS["llamacpp"].uses)
    if missing:
        missing_peer(missing)
    scenario = load_by_name("disconnect_rst_mid")
    seen = {}
    with hold_machine():
        for label, profile in (("by hand", BY_HAND), ("generic", "generic")):
            target = Target.model_validate({**TARGETS["llamacpp"].model_dump(), "profile": profile})
            ctx = RunContext(results_dir=None, target=target)
            try:
                seen[label] = {c.name: c for c in run_scenario(scenario, "live", ctx).checks}
            finally:
                ctx.close()
    for check in ("leak_free", "release_within"):
        assert seen["by hand"][check].observed and seen["by hand"][check].passed, seen["by hand"][check].line()
        assert not seen["generic"][check].observed, seen["generic"][check].line()
    assert seen["by hand"]["waste"].observed is False  # it names no token counter
