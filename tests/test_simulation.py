"""The simulation: virtual time, the transport model, determinism, and that the checks catch a broken engine."""

from __future__ import annotations

import asyncio

import pytest

from harness import runner
from harness.clock import SimulationDeadlock, run_virtual
from harness.scenario import load_by_name
from harness.simulation import SimPipe
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
    first, _ = runner.simulate(scenario)
    second, _ = runner.simulate(scenario)
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
    original = engine_module.sample
    calls = [0]

    def off_by_one(logits, params, rng):
        calls[0] += 1
        token = original(logits, params, rng)
        return (token + 1) % logits.shape[-1] if calls[0] % 97 == 0 else token

    monkeypatch.setattr(engine_module, "sample", off_by_one)
    outcome = run("overlap_4")
    assert failed(outcome) == {"identity"}
    assert "first divergence at token" in " ".join(c.line() for c in outcome.checks)


def test_a_stalling_step_loop_is_caught(monkeypatch):
    """Make every policy deliver like the naive one: the step loop waits for each reader."""
    monkeypatch.setattr(Hub, "waits_for_readers", property(lambda self: True))
    outcome = run("slow_reader_pause_1")
    assert "latency" in failed(outcome)
