"""When a server has drained, read from its /stats: the one rule every waiter uses (the harness's
live and simulated runs, the tests)."""

from __future__ import annotations


def pool_whole(stats: dict) -> bool:
    """Every cache block is free, or cached by the prefix cache with no owner (evicted when
    admission needs the room): what a drained server holds when nothing leaked."""
    return stats["blocks_free"] + stats.get("blocks_evictable", 0) == stats["blocks_total"]


def drained(stats: dict) -> bool:
    """Nothing runs, waits or is registered, and no step is between freeing a sequence and writing
    its release record. The step thread frees blocks inside the engine's step and records the
    release just after it; a reader that took an idle engine alone for drained could read the
    books one release short (seen on a loaded CI machine)."""
    return (stats["running"] == stats["waiting"] == stats["streams_registered"] == 0
            and not stats["step_in_flight"])
