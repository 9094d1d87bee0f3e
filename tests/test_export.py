"""streamlab export: a preset written as a transformers folder loads back as the same model."""

import torch

from streamlab.cli import main
from streamlab.models import load_model


def test_exported_tiny_loads_back_with_the_same_weights_tokenizer_and_greedy_tokens(tmp_path, tiny):
    folder = tmp_path / "tiny-hf"
    assert main(["export", "tiny", str(folder)]) == 0
    for name in ("config.json", "model.safetensors", "tokenizer.json", "generation_config.json"):
        assert (folder / name).exists(), name
    back = load_model(str(folder))
    assert torch.equal(back.model.wte, tiny.model.wte)
    assert torch.equal(back.model.layers[1].fc2_w, tiny.model.layers[1].fc2_w)
    text = "Return the number of items in the container."
    assert back.tokenizer.encode(text, add_special_tokens=False) == tiny.tokenizer.encode(text)
    assert back.model.eos_token_id == tiny.model.eos_token_id

    from streamlab.config import EngineConfig
    from streamlab.engine.engine import BatchEngine
    from streamlab.sampling import SamplingParams
    from tests.helpers import drain

    outs = []
    for loaded in (tiny, back):
        engine = BatchEngine(loaded.model, EngineConfig(max_batch=2))
        engine.submit("a", tiny.tokenizer.encode(text), SamplingParams(max_new_tokens=24, ignore_eos=True))
        outs.append(drain(engine).tokens["a"])
    assert outs[0] == outs[1]


def test_export_of_an_unknown_model_fails_with_a_clear_message(tmp_path, capsys):
    assert main(["export", "no-such-model", str(tmp_path / "x")]) == 2
    assert "not a preset" in capsys.readouterr().err
