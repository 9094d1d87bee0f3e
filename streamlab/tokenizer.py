"""The tokenizer a model is served with: ours (shipped as a file) or one saved beside HF weights.

The shipped one is wrapped over the `tokenizers` library directly: importing transformers
costs seconds at every server start, and the presets need nothing from it.
"""

from __future__ import annotations

from pathlib import Path

from tokenizers import Tokenizer

ASSETS = Path(__file__).resolve().parent / "assets"
SHIPPED_TOKENIZER = ASSETS / "tokenizer.json"
EOS_TOKEN = "<|endoftext|>"


class ShippedTokenizer:
    """The byte-level BPE built by scripts/build_tokenizer.py, with the slice of the
    transformers tokenizer interface that streamlab uses."""

    def __init__(self, path: Path = SHIPPED_TOKENIZER) -> None:
        self.path = path
        self._tok = Tokenizer.from_file(str(path))
        self.eos_token = EOS_TOKEN
        self.eos_token_id = self._tok.token_to_id(EOS_TOKEN)
        self.all_special_tokens = [EOS_TOKEN]

    def encode(self, text: str) -> list[int]:
        return self._tok.encode(text, add_special_tokens=False).ids

    def decode(self, ids: list[int]) -> str:
        return self._tok.decode(list(ids), skip_special_tokens=False)

    def convert_ids_to_tokens(self, ids: list[int]) -> list[str | None]:
        return [self._tok.id_to_token(i) for i in ids]

    def get_added_vocab(self) -> dict[str, int]:
        return {EOS_TOKEN: self.eos_token_id}

    def __len__(self) -> int:
        return self._tok.get_vocab_size()

    def to_transformers(self):
        """The same tokenizer as a transformers PreTrainedTokenizerFast (for export and baselines)."""
        from transformers import PreTrainedTokenizerFast

        return PreTrainedTokenizerFast(tokenizer_file=str(self.path), eos_token=EOS_TOKEN, bos_token=EOS_TOKEN,
                                       unk_token=EOS_TOKEN, model_max_length=1024)

    def save_pretrained(self, folder) -> None:
        self.to_transformers().save_pretrained(folder)


def shipped_tokenizer() -> ShippedTokenizer:
    return ShippedTokenizer()
