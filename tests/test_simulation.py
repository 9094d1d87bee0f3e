"""The simulation: virtual time, the transport model, determinism, and that the checks catch a broken engine."""

from __future__ import annotations

import asyncio

import pytest

from harness.run import once, runner
from harness.sim.clock import SimulationDeadlock, run_virtual
from harness.format.load import load_by_name
from harness.machine.cost_model import StepCostProfile
from harness.sim.transport import SimPipe
from streamlab.engine import engine as engine_module
from streamlab.engine.scheduler import Scheduler
from streamlab.hub import Hub


def test_virtual_time_jumps_and_never_goes_back():
    async def main():
        loop = asyncio.get_running_loop()
        await asyncio.sleep(3600)
        with pytest.raises(ValueError):
            loop.advance(-1)
        return loop.time()

    assert run_virtual(main()) == 3600


def test_a_wait_for_nothing_is_a_deadlock_not_a_hang():
    async def main():
        await asyncio.Event().wait()

    with pytest.raises(SimulationDeadlock):
        run_virtual(main())


def test_pipe_blocks_writes_at_capacity_and_delivers_after_latency():
    async def main():
        loop = asyncio.get_running_loop()
        pipe, gone = SimPipe(capacity=100, latency_s=0.5, rate_bytes_per_s=1000), asyncio.Event()
        await pipe.write(b"a" * 80, gone)
        writer = asyncio.ensure_future(pipe.write(b"b" * 80, gone))
        await asyncio.sleep(0.01)
        assert not writer.done()  # 160 bytes would be over the 100 the buffer holds
        first = await pipe.read(1000)
        arrived_at = loop.time()
        await writer
        assert first == b"a" * 80 and arrived_at == pytest.approx(0.08 + 0.5)  # 80 B at 1000 B/s, then latency
        gone.set()
        await pipe.write(b"c" * 500, gone)  # after a disconnect, writes return at once
    run_virtual(main())


def test_same_seed_same_trace_byte_for_byte():
    scenario = load_by_name("disconnect_rst_early")
    first, _ = once.simulate(scenario)
    second, _ = once.simulate(scenario)
    assert first.to_json() == second.to_json()
    assert any(s.closed_at for s in first.streams)


# ---- a broken engine is caught ----

def run(name: str):
    return runner.run_scenario(load_by_name(name), "sim", runner.RunContext(results_dir=None))


def failed(outcome) -> set[str]:
    return {c.name for c in outcome.checks if not c.passed}


def test_the_shipped_scenarios_pass_unbroken():
    assert run("disconnect_fin_mid").ok and run("overlap_4").ok


def test_a_skipped_release_is_caught(monkeypatch):
    original = Scheduler.finish
    skipped = []

    def leaky(self, seq, reason, step):
        if seq.admitted_step is not None and not skipped and reason.value == "cancelled":
            skipped.append(seq.seq_id)  # forget this one's blocks
            self.running.remove(seq)
            seq.status = engine_module.SequenceStatus.FINISHED
            seq.finish_reason, seq.finished_step = reason, step
            return
        original(self, seq, reason, step)

    monkeypatch.setattr(Scheduler, "finish", leaky)
    outcome = run("disconnect_fin_mid")
    assert skipped and {"leak_free", "exactly_once"} <= failed(outcome)


def test_a_double_release_is_caught(monkeypatch):
    original = Scheduler.finish

    def twice(self, seq, reason, step):
        original(self, seq, reason, step)
        if reason.value == "cancelled":
            self.blocks.release(seq.seq_id)  # raises DoubleRelease, as it must

    monkeypatch.setattr(Scheduler, "finish", twice)
    outcome = run("disconnect_fin_mid")
    assert "exactly_once" in failed(outcome)
    assert outcome.trace.server["double_release_attempts"] >= 1


def test_a_changed_token_is_caught(monkeypatch):
    original = engine_module.sample_rows
    calls = [0]

    def off_by_one(logits, params, rngs, start=0):
        tokens = []
        for token in original(logits, params, rngs, start):  # every 97th token the engine samples is off
            calls[0] += 1
            tokens.append((token + 1) % logits.shape[-1] if calls[0] % 97 == 0 else token)
        return tokens

    monkeypatch.setattr(engine_module, "sample_rows", off_by_one)
    outcome = run("overlap_4")
    assert failed(outcome) == {"identity"}
    assert "first divergence at token" in " ".join(c.line() for c in outcome.checks)


def test_a_stalling_step_loop_is_caught(monkeypatch):
    """Make every policy deliver like the naive one: the step loop waits for each reader."""
    monkeypatch.setattr(Hub, "waits_for_readers", property(lambda self: True))
    outcome = run("slow_reader_pause_1")
    assert "latency" in failed(outcome)


def test_a_read_takes_at_most_what_the_receive_window_holds():
    # Live, a sleeper with SO_RCVBUF 64 KiB gets ~95 KB per read however much it asks for
    # (`streamlab lab buffers`); the simulated pipe hands over no more than that either.
    async def main():
        pipe, gone = SimPipe(capacity=1 << 20, latency_s=0.0, rate_bytes_per_s=None, read_window=1000), asyncio.Event()
        await pipe.write(b"a" * 2500, gone)
        sizes = [len(await pipe.read(1 << 20)) for _ in range(3)]
        assert sizes == [1000, 1000, 500]
    run_virtual(main())



def test_bytes_behind_a_window_limited_read_are_dated_from_that_read():
    """The bytes a full receive window held back were still the sender's: a live socket stamps
    them as the read makes room, so the pipe dates them no earlier than the read that left them
    (not when the link delivered the whole write); a read the window did not limit leaves none."""
    async def main():
        loop = asyncio.get_running_loop()
        pipe, gone = SimPipe(capacity=1 << 20, latency_s=0.0, rate_bytes_per_s=None, read_window=1000), asyncio.Event()
        await pipe.write(b"a" * 2500, gone)  # all delivered at 0
        dated = []
        for _ in range(3):
            await asyncio.sleep(0.2)
            await pipe.read(1 << 20)
            dated.append(round(pipe.last_arrival, 3))
        assert dated == [0.0, 0.2, 0.4]  # each read's bytes: when the read before it made room
        await pipe.write(b"b" * 10, gone)
        await asyncio.sleep(0.2)
        await pipe.read(1 << 20)
        assert pipe.last_arrival == pytest.approx(loop.time() - 0.2)  # the window was not full: the write's own
    run_virtual(main())

def test_the_profile_interpolates_serving_cost_and_the_read_window():
    profile = StepCostProfile("t", [[1, 0.001], [32, 0.002]], 0.0, 0.0, serving_s=[[0, 0.0], [8, 0.0008], [32, 0.0020]],
                              read_window_bytes=[[16384, 24576], [65536, 94826]])
    assert profile.serving_cost(0) == 0.0 and profile.serving_cost(4) == pytest.approx(0.0004)
    assert profile.serving_cost(20) == pytest.approx(0.0014) and profile.serving_cost(64) == pytest.approx(0.0036)
    assert profile.read_window(65536) == 94826 and profile.read_window(None) is None
    assert StepCostProfile("t", [[1, 0.001], [2, 0.001]], 0.0, 0.0).read_window(65536) is None  # unmeasured: no limit


def test_a_decode_step_costs_more_as_its_sequences_attend_to_more():
    profile = StepCostProfile("t", [[1, 0.001], [8, 0.002]], 0.0, 0.0, decode_per_context_token_s=1e-7,
                              decode_context_ref=40)
    assert profile.decode_cost(8) == profile.decode_cost(8, 8 * 40) == pytest.approx(0.002)
    assert profile.decode_cost(8, 8 * 340) == pytest.approx(0.002 + 8 * 300 * 1e-7)


def test_the_engine_reports_the_context_its_decodes_attended_to(tiny):
    from streamlab.config import EngineConfig
    from streamlab.engine.engine import BatchEngine
    from streamlab.sampling import SamplingParams

    engine = BatchEngine(tiny.model, EngineConfig(max_batch=2))
    for name, n in (("a", 5), ("b", 9)):
        engine.submit(name, list(range(1, n + 1)), SamplingParams(max_new_tokens=4, ignore_eos=True))
    assert engine.step().decode_context == 0  # prefill only
    assert [engine.step().decode_context for _ in range(3)] == [6 + 10, 7 + 11, 8 + 12]


def test_bytes_written_to_clients_take_the_servers_core():
    """Healthy streams beside four readers of 256 KiB events: slower once each byte written costs core time."""
    import dataclasses

    from harness.machine.cost_model import load_profile
    from harness.record.trace import metric_values, percentile
    from harness.sim.backend import SimBackend

    scenario = load_by_name("slow_reader_unbounded_4")
    free = load_profile("tiny")

    def healthy_p50(profile) -> float:
        trace = once.run_trace(scenario, SimBackend(profile))[0]
        return percentile(metric_values(trace.group("healthy"), "completion_s"), 50)

    without = healthy_p50(dataclasses.replace(free, serving_per_byte_s=0.0))
    assert healthy_p50(dataclasses.replace(free, serving_per_byte_s=5e-8)) > 1.2 * without


def test_timers_due_at_one_moment_run_in_the_order_they_were_set():
    """asyncio orders its timer heap by time alone; the simulation's burst of requests sent at one
    moment must reach the server's core in the order it was sent (harness.sim.clock._OrderedTimer)."""
    async def main():
        order: list[int] = []
        loop = asyncio.get_running_loop()
        for i in range(64):
            loop.call_at(loop.time() + 0.0015, order.append, i)
        await asyncio.sleep(0.01)
        return order

    assert run_virtual(main()) == list(range(64))
