"""Live mode: the real server process, real sockets, a real Toxiproxy. (Issue 5.)"""

from __future__ import annotations


def live_unavailable() -> str | None:
    return "live mode is not built yet (it lands with the Toxiproxy issue); the sim item covers this scenario"


def run_live(scenario, progress=None):
    raise NotImplementedError(live_unavailable())
