"""streamlab export: a preset written as a transformers folder loads back as the same model."""

import pytest
import torch

from streamlab.cli import main
from streamlab.models import load_model

# Times nothing (read for it): may run beside another such item under xdist (harness/cores_lock.py).
pytestmark = pytest.mark.shares_cores


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


def test_gguf_export_holds_our_weights_under_llama_cpp_names_and_our_tokenizer(tmp_path, tiny):
    """Read back with gguf's own reader: GPT-2's metadata, every tensor in float32 under
    llama.cpp's name (a linear layer's (out, in): Conv1D weights transposed), no separate output
    matrix (tied), and the tokenizer's tokens, merges and end-of-text id."""
    import gguf
    import numpy as np

    assert main(["export", "tiny", str(tmp_path), "--format", "gguf"]) == 0
    reader = gguf.GGUFReader(str(tmp_path / "tiny.f32.gguf"))

    def field(name):
        f = reader.fields[name]
        return f.contents()

    shape = tiny.model.shape
    assert field("general.architecture") == "gpt2"
    assert (field("gpt2.block_count"), field("gpt2.embedding_length"), field("gpt2.attention.head_count"),
            field("gpt2.context_length")) == (shape.n_layer, shape.n_embd, shape.n_head, shape.n_positions)
    assert field("tokenizer.ggml.model") == "gpt2" and field("tokenizer.ggml.pre") == "gpt-2"
    assert len(field("tokenizer.ggml.tokens")) == len(tiny.tokenizer)
    assert field("tokenizer.ggml.eos_token_id") == tiny.model.eos_token_id
    assert field("tokenizer.ggml.add_bos_token") is False
    tensors = {t.name: t for t in reader.tensors}
    assert "output.weight" not in tensors
    assert all(t.tensor_type == gguf.GGMLQuantizationType.F32 for t in tensors.values())
    assert np.array_equal(np.asarray(tensors["token_embd.weight"].data), tiny.model.wte.numpy())
    from streamlab.models import preset_state_dict
    qkv = preset_state_dict(tiny.model)["transformer.h.1.attn.c_attn.weight"]  # HF Conv1D: (in, out)
    assert np.array_equal(np.asarray(tensors["blk.1.attn_qkv.weight"].data), qkv.t().numpy())


def test_gguf_export_refuses_a_tokenizer_llama_cpp_cannot_read(tmp_path, tiny, monkeypatch):
    from streamlab.export import export_model

    class WordLevel:
        _tok = None
    monkeypatch.setattr(tiny, "tokenizer", WordLevel())
    with pytest.raises(ValueError, match="not a `tokenizers` BPE"):
        export_model(tiny, tmp_path, "gguf")
