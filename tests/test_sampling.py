import pytest
import torch

from streamlab.sampling import SamplingParams, logits_to_probs, make_rng, sample, top2_margin

# Times nothing (read for it): may run beside another such item under xdist (harness/cores_lock.py).
pytestmark = pytest.mark.shares_cores


def test_greedy_is_argmax_and_needs_no_rng():
    logits = torch.tensor([0.1, 2.0, 1.9, -1.0])
    params = SamplingParams()
    assert params.greedy and make_rng(params) is None
    assert sample(logits, params, None) == 1


def test_top_k_keeps_only_the_k_largest():
    probs = logits_to_probs(torch.tensor([1.0, 4.0, 3.0, 2.0]), SamplingParams(temperature=1.0, top_k=2))
    assert probs[0] == 0 and probs[3] == 0 and torch.isclose(probs.sum(), torch.tensor(1.0))


def test_top_p_keeps_the_smallest_prefix_reaching_p():
    logits = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05]))
    probs = logits_to_probs(logits, SamplingParams(temperature=1.0, top_p=0.75))
    assert probs[2] == 0 and probs[3] == 0
    torch.testing.assert_close(probs[:2], torch.tensor([0.625, 0.375]))
    one = logits_to_probs(logits, SamplingParams(temperature=1.0, top_p=0.1))
    assert one[0] == 1.0  # always at least one token


def test_same_seed_same_tokens():
    logits = torch.randn(100, generator=torch.Generator().manual_seed(0))
    params = SamplingParams(temperature=1.0, seed=42)
    a, b = make_rng(params), make_rng(params)
    assert [sample(logits, params, a) for _ in range(20)] == [sample(logits, params, b) for _ in range(20)]


@pytest.mark.parametrize("kwargs", [{"max_new_tokens": 0}, {"temperature": -1}, {"top_k": -1}, {"top_p": 0.0},
                                    {"top_p": 1.5}])
def test_bad_params_are_refused(kwargs):
    with pytest.raises(ValueError):
        SamplingParams(**kwargs)


def test_top2_margin():
    assert top2_margin(torch.tensor([1.0, 3.0, 2.5])) == pytest.approx(0.5)
