"""`streamlab export`: any model streamlab can load, written as a transformers model folder.

The folder holds config.json, the weights (safetensors) and the tokenizer, so that other
stacks (transformers' own `transformers serve`, for the peer benchmark) serve the very
weights we do, with no download.
"""

from __future__ import annotations

import json
from pathlib import Path

from streamlab.models import LoadedModel


def export_model(loaded: LoadedModel, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    hf = loaded.hf_model()
    hf.generation_config.pad_token_id = loaded.model.eos_token_id
    hf.save_pretrained(folder)
    loaded.tokenizer.save_pretrained(folder)
    (folder / "streamlab.json").write_text(json.dumps({"exported_from": loaded.name}, indent=2) + "\n")
    return folder
