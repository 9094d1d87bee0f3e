"""Issue 25: the null model holds thousands of streams in one batch; a scenario's clients split
over Ray workers give the same outcomes and pass the same checks as one process; a two-node Ray
cluster on loopback (a head and a second node, each started as its own processes: a stand-in
for a second machine) runs one scenario across both nodes, with the workers' clock offsets
measured and reported on the trace. Every server and node here is on 127.0.0.1."""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.live.backend import live_unavailable
from harness.clients.plan import plan, tokenizer_for
from harness.run.runner import RESULTS, RunContext, run_scenario
from harness.format.scenario import Scenario
from harness.format.load import load
from harness.live.shards import Sharding, refused, shard_of, sharding_unavailable
from streamlab.config import CacheConfig, EngineConfig
from streamlab.engine.engine import BatchEngine
from streamlab.models import load_model
from streamlab.sampling import SamplingParams

SCALE = Path(__file__).parents[1] / "scenarios" / "scale"
needs_live = pytest.mark.skipif(live_unavailable() is not None, reason=str(live_unavailable()))
needs_ray = pytest.mark.skipif(sharding_unavailable() is not None, reason=str(sharding_unavailable()))


@pytest.fixture(scope="module", autouse=True)
def no_cluster_left_running():
    """A local cluster that a run starts lives as long as its process (harness.live.shards), and this
    process goes on to the timing checks: its daemons (raylet, GCS, monitors) must not wake on
    their cores for the rest of the session (a fresh-clone CI had them up for its last 40 minutes)."""
    yield
    if sharding_unavailable() is None:
        import ray

        if ray.is_initialized():
            ray.shutdown()


def _run_to_end(engine: BatchEngine, max_steps: int) -> tuple[dict[str, list[int]], int]:
    tokens: dict[str, list[int]] = {}
    widest = 0
    for _ in range(max_steps):
        if not engine.has_work():
            break
        out = engine.step()
        widest = max(widest, out.decoded)
        for t in out.tokens:
            tokens.setdefault(t.request_id, []).append(t.token_id)
    return tokens, widest


def test_the_null_model_holds_thousands_in_one_batch_and_a_stream_is_the_same_alone():
    model = load_model("null").model
    n, new = 4096, 8
    engine = BatchEngine(model, EngineConfig(max_batch=n, cache=CacheConfig(num_blocks=2 * n), step_token_budget=0))
    prompts = {f"r{i}": [1 + i % 50, 2 + i % 7, 3] for i in range(n)}
    for rid, prompt in prompts.items():
        engine.submit(rid, prompt, SamplingParams(max_new_tokens=new))
    tokens, widest = _run_to_end(engine, 4 * new)
    assert widest == n  # every stream decoded in one batch
    assert all(len(t) == new for t in tokens.values()) and len(tokens) == n  # never eos: each runs its length
    assert engine.stats().blocks_free == 2 * n and not engine.check_released()
    for rid in ("r0", "r1234", "r4095"):  # alone, the same tokens
        alone = BatchEngine(model, EngineConfig(max_batch=1, cache=CacheConfig(num_blocks=4), step_token_budget=0))
        alone.submit(rid, prompts[rid], SamplingParams(max_new_tokens=new))
        assert _run_to_end(alone, 4 * new)[0][rid] == tokens[rid]


def test_a_shard_is_its_clients_by_id_and_every_worker_plans_the_same_schedule():
    scenario = load(SCALE / "scale_null_2000.yaml")
    planned = plan(scenario, tokenizer_for(scenario.server.model))
    again = plan(Scenario.model_validate(scenario.model_dump(mode="json")), tokenizer_for(scenario.server.model))
    assert [(p.index, p.at_s, p.prompt) for p in planned] == [(p.index, p.at_s, p.prompt) for p in again]
    for workers in (1, 2, 3, 7):
        shards = [shard_of(planned, k, workers) for k in range(workers)]
        assert sorted(i for s in shards for i in s) == list(range(len(planned)))  # each client once
        assert max(map(len, shards)) - min(map(len, shards)) <= 1


def test_a_join_while_group_is_refused_over_workers_with_the_reason():
    scenario = load(Path(__file__).parents[1] / "scenarios" / "late_joiners_8.yaml")
    assert refused(scenario, 1) is None
    assert "joins while" in refused(scenario, 2)


def _outcomes(outcome) -> list[tuple]:
    return [(s.group, s.index, s.finish, tuple(s.token_ids)) for s in outcome.trace.streams]


def _peak_open(outcome) -> int:
    """The most streams open at one moment: sent, and not yet ended or left."""
    edges = []
    for s in outcome.trace.streams:
        if s.sent_at is not None and s.stopped_at is not None:
            edges += [(s.sent_at, 1), (s.stopped_at, -1)]
    peak = now = 0
    for _, step in sorted(edges):
        now += step
        peak = max(peak, now)
    return peak


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LocalRayCluster:
    """A head node and a second node, each a `ray start --block` process of its own (stopping it
    stops that node's processes, and no other Ray on the machine), joined at 127.0.0.1 with a
    token made for this cluster (`env`: what `ray start` and a driver need). Ray on Linux
    registers a node under the machine's own address rather than the loopback one
    (ray/_private/services.py resolve_ip_for_localhost); the streams themselves stay on 127.0.0.1."""

    def __init__(self, tmp: Path) -> None:
        self.bin = Path(sys.executable).parent
        self.port = _free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32),
                    "RAY_USAGE_STATS_ENABLED": "0"}
        self.tmp = tmp
        self.nodes: list[subprocess.Popen] = []
        self.logs: list = []

    def _node(self, name: str, *args: str) -> None:
        log = open(self.tmp / f"ray-{name}.log", "w")
        self.logs.append(log)
        self.nodes.append(subprocess.Popen(
            [str(self.bin / "ray"), "start", "--block", *args, "--num-cpus", "1", "--object-store-memory",
             str(200 * 2 ** 20), "--disable-usage-stats"], stdout=log, stderr=subprocess.STDOUT, env=self.env))

    def _active_nodes(self) -> int:
        done = subprocess.run([str(self.bin / "ray"), "status", "--address", self.address], capture_output=True,
                              text=True, timeout=60, env=self.env)
        active = done.stdout.split("Active:", 1)[-1].split("Pending:", 1)[0]
        return sum(1 for line in active.splitlines() if "node_" in line) if done.returncode == 0 else 0

    def _wait_for(self, nodes: int, deadline_s: float = 120.0) -> None:
        until = time.monotonic() + deadline_s
        while self._active_nodes() < nodes:
            logs = "".join(p.read_text()[-1500:] for p in sorted(self.tmp.glob("ray-*.log")))
            assert all(n.poll() is None for n in self.nodes), f"a ray node exited: {logs}"
            assert time.monotonic() < until, f"{nodes} ray nodes not up within {deadline_s} s: {logs}"
            time.sleep(1.0)

    def __enter__(self) -> "LocalRayCluster":
        try:
            self._node("head", "--head", "--port", str(self.port), "--include-dashboard", "false")
            self._wait_for(1)
            self._node("second", "--address", self.address)
            self._wait_for(2)
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc) -> None:
        for node in reversed(self.nodes):  # the second node first, then the head
            node.terminate()
            try:
                node.wait(timeout=60)
            except subprocess.TimeoutExpired:
                node.kill()
                node.wait(timeout=30)
        for log in self.logs:
            log.close()


@needs_live
@needs_ray
def test_2000_streams_in_one_process_and_over_a_two_node_ray_cluster_end_alike(tmp_path):
    """The same scenario in this process, then with `streamlab scenario run --ray ADDRESS --workers 2`
    against a two-node cluster: the same checks pass and every stream ends alike."""
    path = SCALE / "scale_null_2000.yaml"
    one = run_scenario(load(path), "live", RunContext(results_dir=None))
    assert one.ok, one.failures()
    with LocalRayCluster(tmp_path) as cluster:
        done = subprocess.run([str(cluster.bin / "streamlab"), "scenario", "run", str(path), "--mode", "live",
                               "--ray", cluster.address, "--workers", "2"],
                              capture_output=True, text=True, timeout=600, env=cluster.env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    two = json.loads((RESULTS / "scale_null_2000-live.json").read_text())
    assert [c["name"] for c in two["checks"] if c["passed"] is not None] == [c.name for c in one.checks if c.observed]
    assert all(c["passed"] is not False for c in two["checks"]), [c for c in two["checks"] if c["passed"] is False]
    theirs = [(s["group"], s["index"], s["finish"], tuple(s["token_ids"])) for s in two["streams"]]
    assert theirs == _outcomes(one)  # every stream's end and tokens, client by client
    workers = two["workers"]
    assert len({w["node"] for w in workers}) == 2, workers  # one worker on each node
    assert sum(w["clients"] for w in workers) == 2000
    for w in workers:  # the skew between workers' clocks, measured and on the trace
        assert abs(w["clock_offset_ms"]) <= 50 and w["clock_offset_bound_ms"] <= 50, w
        assert w["ready_before_t0_ms"] > 0, w  # planned before T0: no client started late
    print("workers:", workers)


@needs_live
@needs_ray
def test_4000_concurrent_streams_pass_their_checks_over_two_workers():
    scenario = load(SCALE / "scale_null_4000.yaml")
    ctx = RunContext(results_dir=None, sharding=Sharding(2))
    try:
        outcome = run_scenario(scenario, "live", ctx)
    finally:
        ctx.close()
    assert outcome.ok, outcome.failures()
    assert _peak_open(outcome) >= 4000, _peak_open(outcome)  # all of them open at once
    assert [w["clients"] for w in outcome.trace.workers] == [2000, 2000]
    assert all(w["ready_before_t0_ms"] > 0 for w in outcome.trace.workers), outcome.trace.workers
    print("workers:", outcome.trace.workers)


def test_a_null_model_scenario_that_asks_for_a_simulation_is_refused_naming_the_field(tmp_path):
    path = tmp_path / "null_sim.yaml"
    path.write_text('name: null_sim\nserver: {model: "null"}\ngroups: [{name: g, behaviour: {kind: reader}}]\n')
    with pytest.raises(Exception, match=r"null_sim.yaml:\d+: modes: the null model runs live only"):
        load(path)
    path.write_text('name: null_sim\nserver: {model: null}\ngroups: [{name: g, behaviour: {kind: reader}}]\n')
    with pytest.raises(Exception, match='server.model: .*write model: "null"'):
        load(path)


@needs_live
def test_the_capacity_benchmark_reads_every_stream_and_bounds_its_samples_error(tmp_path):
    """The capacity benchmark's clients (the harness's own) read every stream from the null server,
    on asyncio's loop and the live harness's (harness.live.loops). At 32 streams the loop keeps up, so
    most sampled tokens' reads took them alone (error 0: their own segment's stamp), and none is
    bounded at a whole step or more at p99 (a stall of the loop that long under a loaded CI
    would be the machine's, not the method's); no read's kernel stamp is earlier than the server's clock
    as it wrote the event (a stamp in another clock would be)."""
    from benchmarks import harness_capacity
    from harness.live.loops import run_on_live_loop

    async def main():
        async with harness_capacity.ServerProcess(harness_capacity.server_args(), log_dir=tmp_path) as server:
            return await harness_capacity.one_count(server.port, 32, server.proc.pid)

    for uvloop in (False, True):
        row = run_on_live_loop(main(), uvloop)
        assert row["completed"] == 32 and row["failures"] == 0
        assert row["events"] == 32 * harness_capacity.TOKENS
        assert row["sampled_events"] == 4 * harness_capacity.TOKENS  # 4 sampled clients, every token
        assert row["stamped_before_written"] == 0
        assert row["error_p50_ms"] == 0.0 and row["error_p99_ms"] < harness_capacity.STEP_MS, row
        assert row["harness_cpu_us_per_event"] > 0 and row["server_cpu_us_per_event"] > 0


def test_a_sampled_reads_error_is_zero_alone_and_bounded_when_it_took_several():
    """event_errors: a read of one whole event is exact; a read of two is bounded by its stamp less
    the later of the previous read's start and each event's written_at."""
    from benchmarks.harness_capacity import event_errors
    from harness.clients.rawhttp import Read

    def token(t: float) -> bytes:
        body = b'event: token\ndata: {"index": 0, "written_at": %r}\n\n' % t
        return b"%x\r\n%s\r\n" % (len(body), body)
    reads = [Read(0.0, 0.0, 10.0, 10.5, token(9.9)),  # alone: its own stamp
             Read(10.5, 0.0, 20.0, 20.1, token(15.0) + token(19.0)),  # two: after 15.0 and after 19.0
             Read(20.1, 10.5, 31.0, 31.1, token(20.0))]  # one, but a partial chunk follows: after 20.0
    reads[2].data += b"5\r\nev"
    assert event_errors(reads) == [0.0, 20.0 - 15.0, 20.0 - 19.0, 31.0 - 20.0]


def test_a_section_is_written_into_the_results_page_as_it_is(tmp_path, monkeypatch):
    """A run of the capacity section alone (the other sections' JSON absent: results/ is not
    committed) replaces its own block of the page, or adds it before the closing section, and
    leaves every other section's text as it was."""
    from benchmarks import page

    monkeypatch.setattr(page, "DOCS", tmp_path)
    (tmp_path / "RESULTS.md").write_text("# Results\n\n## Harness speed\n\nold\n\n## What the numbers do not show\n\n- x\n")
    rows = [{"clients": 16, "completed": 16, "events_per_s": 300.0, "events_per_s_all_open": 320.0,
             "ideal_events_per_s": 320.0, "error_p50_ms": 0.0, "error_p99_ms": 0.4, "error_max_ms": 2.0,
             "events_over_1ms": 0.0, "read_late_p50_ms": 0.3, "read_late_p99_ms": 2.0, "multi_event_reads": 0.0,
             "lag_p50_ms": 0.1, "lag_p99_ms": 1.0, "harness_cpu_us_per_event": 70.0, "server_cpu_us_per_event": 80.0}]
    first = {"loops": {"asyncio": {"rows": rows, "sustained_clients": 16}}, "stamp_limit_ms": 1.0, "step_ms": 50,
             "tokens": 64, "arrival_s": 2, "sample_every": 8}
    monkeypatch.setattr(page, "read_json", lambda name: first if name == "capacity" else None)
    page.splice_page(["capacity"])
    text = (tmp_path / "RESULTS.md").read_text()
    assert text.index("## Harness speed\n\nold") < text.index("## Harness capacity") < text.index("## What the numbers")
    again = {**first, "loops": {"asyncio": {"rows": rows, "sustained_clients": 8}}}
    monkeypatch.setattr(page, "read_json", lambda name: again if name == "capacity" else None)
    page.splice_page(["capacity"])
    text = (tmp_path / "RESULTS.md").read_text()
    assert text.count("## Harness capacity") == 1 and "**8** clients" in text and "old" in text
