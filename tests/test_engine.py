import random
import threading

import pytest

from streamlab.engine.sequence import FinishReason
from streamlab.errors import DuplicateRequest, RequestError, RequestTooLarge
from streamlab.sampling import SamplingParams
from tests.helpers import assert_clean, drain, run_steps

# Times nothing (read for it): may run beside another such item under xdist (harness/cores_lock.py).
pytestmark = pytest.mark.shares_cores


def ids(n: int, seed: int = 0) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(1, 8192) for _ in range(n)]


def greedy(n: int) -> SamplingParams:
    return SamplingParams(max_new_tokens=n, ignore_eos=True)


def test_a_request_runs_to_its_length_and_is_released_once(make_engine):
    engine = make_engine()
    engine.submit("a", ids(10), greedy(5))
    out = drain(engine)
    assert len(out.tokens["a"]) == 5
    assert out.finished["a"].reason is FinishReason.LENGTH
    assert out.finished["a"].completion_tokens == 5
    assert engine.stats().releases == 1
    assert_clean(engine)


def test_first_token_comes_from_the_prefill_in_the_admitting_step(make_engine):
    engine = make_engine()
    engine.submit("a", ids(10), greedy(3))
    first = engine.step()
    assert first.prefilled == 1 and first.decoded == 0
    assert [(t.request_id, t.index) for t in first.tokens] == [("a", 0)]
    second = engine.step()
    assert second.prefilled == 0 and second.decoded == 1


def test_on_prefill_hands_over_each_first_token_before_the_step_ends(tiny, make_engine):
    from streamlab.config import CacheConfig, EngineConfig
    from streamlab.engine.engine import BatchEngine

    plain = make_engine()
    # Whole-prompt prefill (step_token_budget 0): the mode whose passes hand over early.
    early = BatchEngine(tiny.model, EngineConfig(max_batch=8, cache=CacheConfig(256, 16), prefill_pass_tokens=1,
                                                 step_token_budget=0))
    for engine in (plain, early):
        engine.submit("a", ids(10, 1), greedy(4))
        engine.submit("b", ids(12, 2), greedy(1))  # its first token is its last
        engine.submit("c", ids(9, 3), greedy(4))
    parts = []
    seen_in_step = []
    first = early.step(lambda part: (parts.append(part), seen_in_step.append(early.stats().tokens_generated)))
    assert [[(t.request_id, t.index) for t in p.tokens] for p in parts] == [[("a", 0)], [("b", 0)], [("c", 0)]]
    assert seen_in_step == [1, 2, 3]  # each handed over before the next prefill ran
    assert [f.request_id for p in parts for f in p.finished] == ["b"]
    assert all(p.prefilled == 1 and p.prefill_tokens > 0 for p in parts)
    assert first.tokens == [] and first.prefilled == 0 and first.finished == []
    assert early.stats().releases == 1  # b went back inside the step, once
    # The same tokens either way: early delivery changes when, not what.
    late = drain(plain).tokens
    rest = drain(early).tokens
    for rid in "abc":
        firsts = [t.token_id for p in parts for t in p.tokens if t.request_id == rid]
        assert firsts + rest.get(rid, []) == late[rid]
    assert_clean(early)


def test_prefill_passes_pack_prompts_up_to_the_token_limit_with_the_same_tokens(tiny, make_engine):
    from streamlab.config import CacheConfig, EngineConfig
    from streamlab.engine.engine import BatchEngine

    lengths = [10, 12, 9, 30, 5]
    packed = BatchEngine(tiny.model, EngineConfig(max_batch=8, cache=CacheConfig(256, 16), prefill_pass_tokens=25,
                                                  step_token_budget=0))
    solo = make_engine()
    parts = []
    for i, n in enumerate(lengths):
        packed.submit(str(i), ids(n, i), greedy(6))
    packed.step(parts.append)
    # 10+12 fit in 25, 9 does not; 30 alone (longer than a pass); then 5.
    assert [[t.request_id for t in p.tokens] for p in parts] == [["0", "1"], ["2"], ["3"], ["4"]]
    assert [p.prefill_tokens for p in parts] == [22, 9, 30, 5]
    got = drain(packed).tokens
    for i, n in enumerate(lengths):
        solo.submit(str(i), ids(n, i), greedy(6))
        alone = drain(solo).tokens[str(i)]
        first = [t.token_id for p in parts for t in p.tokens if t.request_id == str(i)]
        assert first + got[str(i)] == alone, f"prompt {i} differs from its solo run"
    assert_clean(packed)


def test_max_prefills_per_step_admits_that_many_and_decodes_the_rest(tiny):
    from streamlab.config import CacheConfig, EngineConfig
    from streamlab.engine.engine import BatchEngine

    engine = BatchEngine(tiny.model, EngineConfig(max_batch=8, cache=CacheConfig(256, 16), max_prefills_per_step=2))
    for i in range(5):
        engine.submit(str(i), ids(8, i), greedy(3))
    shape = [(out.prefilled, out.decoded) for out in (engine.step() for _ in range(4))]
    assert shape == [(2, 0), (2, 2), (1, 4), (0, 3)]
    drain(engine)
    assert_clean(engine)


def test_admission_is_limited_by_blocks_in_arrival_order(make_engine):
    engine = make_engine(max_batch=8, num_blocks=10, block_size=4)
    engine.submit("a", ids(12, 1), greedy(12))  # 24 tokens: 6 blocks
    engine.submit("b", ids(12, 2), greedy(12))  # 6 blocks: does not fit beside a
    engine.submit("c", ids(4, 3), greedy(4))  # 2 blocks: would fit, but arrived after b
    engine.step()
    stats = engine.stats()
    assert (stats.running, stats.waiting, stats.blocks_reserved) == (1, 2, 6)
    out = drain(engine)
    assert set(out.finished) == {"a", "b", "c"}
    assert out.token_steps["b"][0] > out.token_steps["a"][-1] - 1  # b only after a ended
    assert out.token_steps["c"][0] == out.token_steps["b"][0]  # c admitted with b, not before
    assert_clean(engine)


def test_batch_limit_caps_running_sequences(make_engine):
    engine = make_engine(max_batch=2)
    for i in range(5):
        engine.submit(f"r{i}", ids(6, i), greedy(3))
    engine.step()
    assert (engine.stats().running, engine.stats().waiting) == (2, 3)
    drain(engine)
    assert_clean(engine)


def test_cancelling_a_waiting_request_means_it_is_never_admitted(make_engine):
    engine = make_engine(max_batch=1)
    engine.submit("a", ids(6), greedy(4))
    engine.submit("b", ids(6, 1), greedy(4))
    engine.cancel("b")
    out = drain(engine)
    assert "b" not in out.tokens
    assert out.finished["b"].reason is FinishReason.CANCELLED and out.finished["b"].completion_tokens == 0
    assert engine.stats().releases == 1  # only a ever held blocks
    assert_clean(engine)


def test_cancelling_a_running_request_releases_it_at_the_next_step(make_engine):
    engine = make_engine()
    engine.submit("a", ids(6), greedy(50))
    engine.step()
    engine.step()
    engine.cancel("a")
    step = engine.step()
    assert [f.request_id for f in step.finished] == ["a"] and step.tokens == []
    assert step.finished[0].reason is FinishReason.CANCELLED
    assert_clean(engine)


def test_cancel_twice_and_after_the_end_is_harmless(make_engine):
    engine = make_engine()
    engine.submit("a", ids(6), greedy(2))
    engine.cancel("a")
    engine.cancel("a")
    drain(engine)
    engine.cancel("a")
    engine.cancel("never-existed")
    drain(engine)
    assert engine.stats().finished_by_reason["cancelled"] == 1
    assert_clean(engine)


def test_pause_keeps_blocks_and_slot_and_resume_continues(make_engine):
    engine = make_engine(max_batch=1)
    engine.submit("a", ids(6), greedy(6))
    engine.submit("b", ids(6, 1), greedy(2))
    engine.step()
    engine.pause("a")
    before = engine.stats()
    for _ in range(3):
        step = engine.step()
        assert step.tokens == []  # a is paused, b cannot take its slot
    during = engine.stats()
    assert (during.paused, during.running, during.waiting) == (1, 1, 1)
    assert during.blocks_reserved == before.blocks_reserved
    engine.resume("a")
    out = drain(engine)
    assert len(out.tokens["a"]) == 5 and len(out.tokens["b"]) == 2
    assert_clean(engine)


def test_paused_sequence_gives_the_same_tokens_as_an_unpaused_one(make_engine):
    engine = make_engine()
    engine.submit("a", ids(9), greedy(12))
    straight = drain(engine).tokens["a"]
    engine.submit("a", ids(9), greedy(12))
    out = run_steps(engine, 3)
    engine.pause("a")
    engine.step()
    engine.resume("a")
    rest = drain(engine, out)
    assert rest.tokens["a"] == straight


class EosIs:
    """The tiny model under another eos id, so a known token ends the sequence."""

    def __init__(self, model, eos: int) -> None:
        self._model, self.eos_token_id = model, eos

    def __getattr__(self, name):
        return getattr(self._model, name)


def test_eos_ends_a_sequence_unless_ignored(tiny, make_engine):
    engine = make_engine()
    engine.submit("probe", ids(8), greedy(6))
    third = drain(engine).tokens["probe"][2]
    from streamlab.config import EngineConfig
    from streamlab.engine.engine import BatchEngine
    eos_engine = BatchEngine(EosIs(tiny.model, third), EngineConfig(max_batch=4))
    eos_engine.submit("a", ids(8), SamplingParams(max_new_tokens=6))
    eos_engine.submit("b", ids(8), SamplingParams(max_new_tokens=6, ignore_eos=True))
    out = drain(eos_engine)
    assert out.finished["a"].reason is FinishReason.EOS
    assert out.tokens["a"][-1] == third and len(out.tokens["a"]) <= 3
    assert out.finished["b"].reason is FinishReason.LENGTH and len(out.tokens["b"]) == 6
    assert_clean(eos_engine)


def test_stop_check_ends_the_sequence_in_the_same_step(make_engine):
    engine = make_engine()
    seen: list[int] = []

    def stop_after_three(token_id: int) -> bool:
        seen.append(token_id)
        return len(seen) == 3

    engine.submit("a", ids(8), greedy(20), stop_check=stop_after_three)
    out = drain(engine)
    assert len(out.tokens["a"]) == 3 and out.finished["a"].reason is FinishReason.STOP
    assert out.finished["a"].step == out.token_steps["a"][-1]
    assert_clean(engine)


def test_external_stop_ends_before_another_token(make_engine):
    engine = make_engine()
    engine.submit("a", ids(8), greedy(20))
    engine.step()
    engine.stop("a")
    step = engine.step()
    assert step.tokens == [] and step.finished[0].reason is FinishReason.STOP
    assert_clean(engine)


@pytest.mark.parametrize("prompt_len,max_new,blocks,error", [
    (1000, 100, 256, RequestTooLarge),  # over the model's 1024-token context
    (40, 40, 4, RequestTooLarge),  # 80 tokens = 5 blocks, the cache has 4
    (0, 4, 256, RequestError),
])
def test_requests_that_can_never_fit_are_refused_at_submit(make_engine, prompt_len, max_new, blocks, error):
    engine = make_engine(num_blocks=blocks)
    with pytest.raises(error):
        engine.submit("a", ids(prompt_len), greedy(max_new))
    assert not engine.has_work() and engine.stats().requests_submitted == 0


def test_out_of_vocabulary_ids_and_duplicate_ids_are_refused(make_engine):
    engine = make_engine()
    with pytest.raises(RequestError):
        engine.submit("a", [1, 2, 99999], greedy(2))
    engine.submit("a", ids(4), greedy(2))
    with pytest.raises(DuplicateRequest):
        engine.submit("a", ids(4), greedy(2))
    drain(engine)
    engine.submit("a", ids(4), greedy(2))  # an id may be reused once its request ended
    drain(engine)
    assert_clean(engine)


def test_stats_count_steps_tokens_and_releases(make_engine):
    engine = make_engine()
    for i in range(3):
        engine.submit(f"r{i}", ids(5, i), greedy(4))
    assert engine.stats().waiting == 3
    out = drain(engine)
    s = engine.stats()
    assert s.steps == out.steps and s.tokens_generated == 12 and s.releases == 3
    assert s.requests_submitted == 3 and s.requests_finished == 3
    assert s.finished_by_reason["length"] == 3 and s.double_release_attempts == 0


class GatedDecode:
    """The model, with its n-th pass that decodes held at a barrier until the test lets it go."""

    def __init__(self, model, gate_call: int) -> None:
        self._model = model
        self.gate_call = gate_call
        self.calls = 0
        self.arrived = threading.Barrier(2, timeout=10)
        self.go = threading.Barrier(2, timeout=10)

    def __getattr__(self, name):
        return getattr(self._model, name)

    def step_forward(self, batch, chunks, cache):
        if batch is not None:  # a decode (chunked prefill runs prompts through here too)
            self.calls += 1
            if self.calls == self.gate_call:
                self.arrived.wait()
                self.go.wait()
        return self._model.step_forward(batch, chunks, cache)


@pytest.mark.parametrize("cancel_during_final_step", [True, False])
def test_cancel_racing_the_last_token_releases_exactly_once(tiny, cancel_during_final_step):
    from streamlab.config import EngineConfig
    from streamlab.engine.engine import BatchEngine
    # max_new_tokens=3: step 1's prefill makes token 0, step 2 (decode call 1) token 1, and
    # step 3 (decode call 2) the last. The cancel arrives inside step 3, where the last token
    # wins, or inside step 2, so that step 3 applies it first and the cancel wins.
    gate_call = 2 if cancel_during_final_step else 1
    gated = GatedDecode(tiny.model, gate_call)
    engine = BatchEngine(gated, EngineConfig(max_batch=2))
    engine.submit("a", ids(8), greedy(3))
    for _ in range(gate_call):
        engine.step()
    results = []
    stepper = threading.Thread(target=lambda: results.append(engine.step()))
    stepper.start()
    gated.arrived.wait()  # the stepping thread is inside a decode now
    engine.cancel("a")
    gated.go.wait()
    stepper.join(timeout=10)
    assert not stepper.is_alive()
    rest = drain(engine)
    finishes = [f for r in results for f in r.finished] + list(rest.finished.values())
    assert len(finishes) == 1
    expected = FinishReason.LENGTH if cancel_during_final_step else FinishReason.CANCELLED
    assert finishes[0].reason is expected
    assert engine.blocks.ledger.entries[0].releases == 1
    assert_clean(engine)
