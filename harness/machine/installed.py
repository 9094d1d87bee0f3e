"""What this process has installed of our own engine: a run against another server needs it only
for what it is compared with (the simulation, solo runs), so the harness asks before it uses it."""

from __future__ import annotations

from functools import lru_cache


@lru_cache(maxsize=1)
def engine_missing() -> str | None:
    """Why streamlab's own engine cannot run in this process, or None. A run against a target
    needs it only for what it is compared with: the simulation (parity) and solo runs where the
    target runs none itself; without it those checks are reported not observable (a user who
    aims the harness at their own server need not install torch: README, target mode)."""
    try:
        import torch  # noqa: F401
    except ImportError as exc:
        return (f"streamlab's own engine is not installed here ({exc}); "
                "pip install 'streamlab[engine]' to simulate and to run requests alone")
    return None
