"""Small helpers shared by tests: drive an engine to idle, explain a token divergence, and make
a trace from client records alone (to judge one check)."""

from __future__ import annotations

from dataclasses import dataclass, field

from streamlab.config import CacheConfig
from streamlab.engine.engine import BatchEngine
from streamlab.engine.outputs import FinishEvent
from streamlab.engine.model import GPT2
from streamlab.sampling import top2_margin

MAX_STEPS = 20_000  # every loop is bounded


@dataclass
class Drained:
    tokens: dict[str, list[int]] = field(default_factory=dict)
    token_steps: dict[str, list[int]] = field(default_factory=dict)
    finished: dict[str, FinishEvent] = field(default_factory=dict)
    steps: int = 0


def drain(engine: BatchEngine, into: Drained | None = None, max_steps: int = MAX_STEPS) -> Drained:
    """Step until idle, recording every event; fail if that takes more than max_steps."""
    out = run_steps(engine, max_steps, into)
    if engine.has_work():
        raise AssertionError(f"engine still busy after {max_steps} steps")
    return out


def run_steps(engine: BatchEngine, count: int, into: Drained | None = None) -> Drained:
    """At most `count` steps (fewer if the engine goes idle), recording every event."""
    out = into or Drained()
    for _ in range(count):
        if not engine.has_work():
            return out
        step = engine.step()
        out.steps += 1
        for ev in step.tokens:
            out.tokens.setdefault(ev.request_id, []).append(ev.token_id)
            out.token_steps.setdefault(ev.request_id, []).append(step.step)
        for fin in step.finished:
            assert fin.request_id not in out.finished, f"{fin.request_id} finished twice"
            out.finished[fin.request_id] = fin
    return out


def assert_clean(engine: BatchEngine) -> None:
    stats = engine.stats()
    assert engine.check_invariants() == []
    assert engine.check_released() == []
    assert stats.blocks_free == stats.blocks_total and stats.blocks_reserved == 0
    assert (stats.waiting, stats.running, stats.paused) == (0, 0, 0)


def divergence(model: GPT2, prompt: list[int], expected: list[int], got: list[int]) -> str | None:
    """None if `got` is a prefix of `expected`; else where they part and how close that call was."""
    for k, (a, b) in enumerate(zip(expected, got)):
        if a != b:
            context = prompt + expected[:k]
            cache = model.new_cache(CacheConfig(num_blocks=CacheConfig().blocks_for(len(context)) + 1))
            import torch
            logits = model.prefill(context, torch.arange(len(context)), cache)
            return (f"first divergence at token {k}: solo {a}, batched {b}; "
                    f"top-2 logit margin there {top2_margin(logits):.3e}")
    if len(got) > len(expected):
        return f"batched run made {len(got)} tokens, solo {len(expected)}"
    return None


def client_trace(scenario: str, mode: str, streams: list):
    """A trace holding only its clients' records (no server state, steps or releases)."""
    from harness.record.trace import Trace

    return Trace(scenario=scenario, mode=mode, seed=0, spec=None, streams=streams, server={}, releases=[],
                 invariants=[], ledger_problems=[])


def as_mode(trace, mode: str = "live"):
    """The trace, its mode set (a simulated trace read as a live one)."""
    trace.mode = mode
    return trace


def skip_unless_live(scenario_name: str) -> None:
    """Skip the calling test, saying why, where a live run of this library scenario cannot run here."""
    import pytest

    from harness.format.load import load_by_name
    from harness.live.backend import live_unavailable

    reason = live_unavailable(load_by_name(scenario_name))
    if reason:
        pytest.skip(reason)
