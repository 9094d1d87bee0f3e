"""`streamlab export`: any model streamlab can load, written for another stack to serve.

- `transformers` (the default): a transformers model folder (config.json, safetensors weights,
  the tokenizer), for `transformers serve` and vLLM.
- `gguf`: one GGUF file for llama.cpp's `llama-server`, written with llama.cpp's own `gguf`
  package: its tensor names (gguf's GPT-2 name map, as llama.cpp's convert_hf_to_gguf.py uses
  it), every tensor in float32 so that greedy tokens can be compared with ours, and the
  tokenizer as a GPT-2 byte-level BPE (its pre-tokenizer is GPT-2's regex, so `gpt-2`).

Either way the other stack serves the very weights we do, with no download.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch: only when a model is written (the command line lists FORMATS without it)
    from streamlab.models import LoadedModel

FORMATS = ("transformers", "gguf")
# HF GPT-2 keeps these as Conv1D weights, (in, out); llama.cpp wants a linear layer's (out, in).
_CONV1D = (".c_attn.weight", ".c_proj.weight", ".c_fc.weight")


def gguf_path(folder: Path, model: str) -> Path:
    """Where `export --format gguf` writes `model` in `folder`."""
    return folder / f"{Path(model).name}.f32.gguf"


def export_model(loaded: LoadedModel, folder: Path, fmt: str = "transformers") -> Path:
    """Write `loaded` into `folder` in `fmt`; returns the folder (transformers) or the file (gguf)."""
    if fmt == "gguf":
        return export_gguf(loaded, gguf_path(folder, loaded.name))
    if fmt != "transformers":
        raise ValueError(f"unknown export format {fmt!r}; expected one of {', '.join(FORMATS)}")
    folder.mkdir(parents=True, exist_ok=True)
    hf = loaded.hf_model()
    hf.generation_config.pad_token_id = loaded.model.eos_token_id
    hf.save_pretrained(folder)
    loaded.tokenizer.save_pretrained(folder)
    (folder / "streamlab.json").write_text(json.dumps({"exported_from": loaded.name}, indent=2) + "\n")
    return folder


def export_gguf(loaded: LoadedModel, path: Path) -> Path:
    import gguf  # llama.cpp's own writer; imported here: only this export needs it

    from streamlab.models import preset_state_dict

    shape = loaded.model.shape
    path.parent.mkdir(parents=True, exist_ok=True)
    arch = gguf.MODEL_ARCH.GPT2
    writer = gguf.GGUFWriter(str(path), gguf.MODEL_ARCH_NAMES[arch])
    writer.add_name(Path(loaded.name).name)
    writer.add_block_count(shape.n_layer)
    writer.add_context_length(shape.n_positions)
    writer.add_embedding_length(shape.n_embd)
    writer.add_feed_forward_length(4 * shape.n_embd)
    writer.add_head_count(shape.n_head)
    writer.add_layer_norm_eps(shape.layer_norm_epsilon)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    _add_tokenizer(writer, loaded, gguf)

    names = gguf.get_tensor_name_map(arch, shape.n_layer)
    for name, tensor in preset_state_dict(loaded.model).items():
        if name == "lm_head.weight":
            continue  # tied to token_embd: llama.cpp's GPT-2 uses the embedding when `output` is absent
        data = tensor.detach().to("cpu").float()
        if name.endswith(_CONV1D):
            data = data.t()
        mapped = names.get_name(name, try_suffixes=(".weight", ".bias"))
        if mapped is None:
            raise ValueError(f"no GGUF name for tensor {name}")
        writer.add_tensor(mapped, data.contiguous().numpy())

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _add_tokenizer(writer, loaded: LoadedModel, gguf) -> None:
    """The tokenizer as llama.cpp's `gpt2` BPE: tokens in id order, their merges, special tokens
    marked as control. Only a byte-level BPE with GPT-2's pre-tokenizer maps onto it."""
    from tokenizers import Tokenizer

    tok = getattr(loaded.tokenizer, "_tok", None) or getattr(loaded.tokenizer, "backend_tokenizer", None)
    if not isinstance(tok, Tokenizer):
        raise ValueError(f"{loaded.name}: its tokenizer is not a `tokenizers` BPE; GGUF export needs one")
    spec = json.loads(tok.to_str())
    model, pre = spec["model"], spec.get("pre_tokenizer") or {}
    if model.get("type") != "BPE" or pre.get("type") != "ByteLevel" or not pre.get("use_regex", True):
        raise ValueError(f"{loaded.name}: GGUF export needs a byte-level BPE with GPT-2's pre-tokenizer, "
                         f"got model {model.get('type')} and pre-tokenizer {pre.get('type')}")
    by_id = {i: t for t, i in model["vocab"].items()}
    special = {t["id"]: t["content"] for t in spec.get("added_tokens", [])}
    by_id.update(special)
    size = max(by_id) + 1
    tokens = [by_id.get(i, f"[PAD{i}]") for i in range(size)]
    types = [gguf.TokenType.CONTROL if i in special else
             gguf.TokenType.NORMAL if i in by_id else gguf.TokenType.UNUSED for i in range(size)]
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    eos = loaded.model.eos_token_id
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("gpt-2")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    writer.add_bos_token_id(eos)  # GPT-2 has one special token for both
    writer.add_eos_token_id(eos)
    writer.add_add_bos_token(False)  # we never prepend it: prompts are the same tokens in both servers
