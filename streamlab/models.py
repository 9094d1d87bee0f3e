"""Model presets and loading: `tiny`, `gpt2-small-random`, or a GPT-2 from a local path or HF cache.

Nothing is downloaded: presets are built here from a seed, and Hugging Face names load only
from files already on disk (HF_HUB_OFFLINE is forced for the load).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from typing import TYPE_CHECKING, Any

import torch

from streamlab.errors import ModelLoadError
from streamlab.engine.model import GPT2
from streamlab.presets import PRESETS, GPT2Shape, Preset
from streamlab.tokenizer import ASSETS, shipped_tokenizer

if TYPE_CHECKING:
    from transformers import GPT2Config, GPT2LMHeadModel

# transformers is imported only where it is needed (HF models, parity tests, baselines):
# importing it costs seconds at every server start.


@dataclass
class LoadedModel:
    name: str
    model: GPT2
    tokenizer: Any  # a ShippedTokenizer, or a transformers tokenizer for HF models
    _hf_config: Any = None

    @property
    def hf_config(self) -> "GPT2Config":
        if self._hf_config is None:
            self._hf_config = hf_config_for(self.model.shape, self.model.eos_token_id)
        return self._hf_config

    def hf_model(self) -> "GPT2LMHeadModel":
        """The same weights as a transformers model (for parity tests, export and baselines)."""
        from transformers import GPT2LMHeadModel

        hf = GPT2LMHeadModel(self.hf_config)
        hf.load_state_dict(preset_state_dict(self.model), strict=False)
        hf.tie_weights()
        return hf.eval()


def hf_config_for(shape: GPT2Shape, eos_token_id: int) -> "GPT2Config":
    from transformers import GPT2Config

    return GPT2Config(vocab_size=shape.vocab_size, n_positions=shape.n_positions, n_embd=shape.n_embd,
                      n_layer=shape.n_layer, n_head=shape.n_head, layer_norm_epsilon=shape.layer_norm_epsilon,
                      bos_token_id=eos_token_id, eos_token_id=eos_token_id, activation_function="gelu_new",
                      resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, tie_word_embeddings=True)


def seeded_state_dict(preset: Preset) -> dict[str, torch.Tensor]:
    """Weights drawn from the preset's seed in a fixed order; independent of transformers' init code."""
    s = preset.shape
    gen = torch.Generator().manual_seed(preset.seed)
    C = s.n_embd

    def normal(*size: int, std: float = preset.block_std) -> torch.Tensor:
        return torch.randn(*size, generator=gen) * std

    sd = {"transformer.wte.weight": normal(s.vocab_size, C, std=preset.embed_std),
          "transformer.wpe.weight": normal(s.n_positions, C, std=preset.embed_std / 2)}
    for i in range(s.n_layer):
        p = f"transformer.h.{i}."
        sd |= {p + "ln_1.weight": torch.ones(C), p + "ln_1.bias": torch.zeros(C),
               p + "attn.c_attn.weight": normal(C, 3 * C), p + "attn.c_attn.bias": torch.zeros(3 * C),
               p + "attn.c_proj.weight": normal(C, C) * preset.proj_gain, p + "attn.c_proj.bias": torch.zeros(C),
               p + "ln_2.weight": torch.ones(C), p + "ln_2.bias": torch.zeros(C),
               p + "mlp.c_fc.weight": normal(C, 4 * C), p + "mlp.c_fc.bias": torch.zeros(4 * C),
               p + "mlp.c_proj.weight": normal(4 * C, C) * preset.proj_gain,
               p + "mlp.c_proj.bias": torch.zeros(C)}
    sd |= {"transformer.ln_f.weight": torch.ones(C), "transformer.ln_f.bias": torch.zeros(C)}
    return sd


def trained_state_dict(preset: Preset) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    path = ASSETS / preset.weights
    if not path.exists():
        raise ModelLoadError(f"{path} is missing: run `python scripts/train_small.py`")
    return {k: v.to(torch.float32) for k, v in load_file(str(path)).items()}


def preset_state_dict(model: GPT2) -> dict[str, torch.Tensor]:
    """Our weights back in transformers' names (lm_head is tied to wte)."""
    sd = {"transformer.wte.weight": model.wte, "transformer.wpe.weight": model.wpe,
          "transformer.ln_f.weight": model.lnf_w, "transformer.ln_f.bias": model.lnf_b,
          "lm_head.weight": model.wte}
    names = ("ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias", "attn.c_proj.weight",
             "attn.c_proj.bias", "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight", "mlp.c_fc.bias",
             "mlp.c_proj.weight", "mlp.c_proj.bias")
    for i, lw in enumerate(model.layers):
        for name, tensor in zip(names, vars(lw).values()):
            sd[f"transformer.h.{i}.{name}"] = tensor
    return sd


def load_model(name: str, null_step_s: float = 0.0) -> LoadedModel:
    """null_step_s: the `null` preset's paced step (streamlab.null_model); other models ignore it."""
    if name in PRESETS:
        preset = PRESETS[name]
        tokenizer = shipped_tokenizer()
        eos = tokenizer.eos_token_id
        if preset.null:
            from streamlab.null_model import NullModel
            return LoadedModel(name, NullModel(preset.shape, eos, null_step_s), tokenizer)
        model = GPT2.from_hf_state_dict(preset.shape, trained_state_dict(preset) if preset.weights
                                        else seeded_state_dict(preset), eos)
        return LoadedModel(name, model, tokenizer)
    return _load_hf(name)


def _load_hf(name: str) -> LoadedModel:
    from transformers import AutoConfig, AutoTokenizer, GPT2LMHeadModel

    os.environ["HF_HUB_OFFLINE"] = "1"  # never download at run time
    hint = (f"model '{name}' is not a preset ({', '.join(PRESETS)}) and was not found on disk; "
            f"download it once with `huggingface-cli download {name}` or pass a local folder")
    try:
        config = AutoConfig.from_pretrained(name, local_files_only=True)
    except (OSError, ValueError) as exc:
        raise ModelLoadError(hint) from exc
    if config.model_type != "gpt2":
        raise ModelLoadError(f"model '{name}' is a {config.model_type!r} model; streamlab serves GPT-2 models only")
    try:
        hf = GPT2LMHeadModel.from_pretrained(name, local_files_only=True, dtype=torch.float32)
        tokenizer = AutoTokenizer.from_pretrained(name, local_files_only=True)
    except (OSError, ValueError) as exc:
        raise ModelLoadError(hint) from exc
    shape = GPT2Shape(config.vocab_size, config.n_positions, config.n_embd, config.n_layer, config.n_head,
                      config.layer_norm_epsilon)
    sd = hf.state_dict()
    model = GPT2.from_hf_state_dict(shape, sd, config.eos_token_id)
    return LoadedModel(str(Path(name)) if Path(name).exists() else name, model, tokenizer, config)
