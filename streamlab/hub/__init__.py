"""The hub: the step loop, each stream's queue and its one close (hub.py assembles the parts)."""

from streamlab.hub.hub import Hub

__all__ = ["Hub"]
