"""The tokenizer a model is served with: ours (shipped as a file) or one saved beside HF weights."""

from __future__ import annotations

from pathlib import Path

from transformers import PreTrainedTokenizerFast

ASSETS = Path(__file__).resolve().parent / "assets"
SHIPPED_TOKENIZER = ASSETS / "tokenizer.json"
EOS_TOKEN = "<|endoftext|>"


def shipped_tokenizer() -> PreTrainedTokenizerFast:
    """The byte-level BPE built by scripts/build_tokenizer.py from the standard library's docstrings."""
    return PreTrainedTokenizerFast(tokenizer_file=str(SHIPPED_TOKENIZER), eos_token=EOS_TOKEN,
                                   bos_token=EOS_TOKEN, unk_token=EOS_TOKEN, model_max_length=1024)
