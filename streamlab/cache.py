"""Where what this machine built or measured is kept across checkouts.

A fresh clone on a machine that ran the suite before (a CI runner, a second checkout) finds
here what does not depend on the checkout: the paged attention kernel built for this CPU and
torch (streamlab.engine.paged_kernel), the fit of this machine's cost model (harness.fit.machine) and,
written by scripts/dev, toxiproxy-server and the real peers' builds. The folder is
$STREAMLAB_CACHE, else $XDG_CACHE_HOME/streamlab, else ~/.cache/streamlab: the same rule
scripts/dev follows. Whatever is cached here says what it was made under and is made again when
that no longer holds; deleting the folder costs time, never a result.
"""

from __future__ import annotations

import json
import os
from pathlib import Path


def cache_root() -> Path:
    if os.environ.get("STREAMLAB_CACHE"):
        return Path(os.environ["STREAMLAB_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "streamlab"


def cache_dir(name: str) -> Path:
    """A folder of the cache (not made here: the writer makes it when it writes)."""
    return cache_root() / name


def write_json(path: Path, data) -> None:
    """A cached file written whole or not at all: a second process (the other xdist worker,
    another checkout's run) reads the old file or the new one, never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    tmp.replace(path)
