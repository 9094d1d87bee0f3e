"""The garbage collector kept out of a run or a measurement, the one way every caller does it.

A full collection inside a run read as a server stall (140 ms in a long suite's process), and
one inside a timed step read 1.75x slow: so the collector is off for the run. Before it, only the
young generations are collected: a full collection of a process that has imported torch and
transformers scans every long-lived object (0.26-0.33 s here, about 440,000 objects), and a
live item ran 52 of them, 14 of its seconds. The old generation is left to the collector's own
schedule between runs, where its pause times nothing.
"""

from __future__ import annotations

import gc
from contextlib import contextmanager


@contextmanager
def quiet_collector():
    """Young garbage collected first, then no collection until the block ends."""
    gc.collect(1)
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
