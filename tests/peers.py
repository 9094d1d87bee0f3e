"""A test that needs a foreign engine (llama-server, vLLM): skipped where it is not installed,
with the reason, except where the run requires every peer (STREAMLAB_REQUIRE_TARGETS, which
`scripts/dev test`, and so CI, sets after installing them): there a missing engine fails the test."""

from __future__ import annotations

import functools
import os

import pytest


def required() -> bool:
    return bool(os.environ.get("STREAMLAB_REQUIRE_TARGETS"))


def missing_peer(reason: str) -> None:
    """Skip for a missing engine, or fail where every peer is required."""
    if required():
        pytest.fail(f"{reason} (STREAMLAB_REQUIRE_TARGETS: every peer must be installed)")
    pytest.skip(reason)


def needs_peer(missing: str | None):
    """Decorator: the test runs where `missing` (an engine's missing() reason) is None."""
    def wrap(test):
        if missing is None:
            return test

        @functools.wraps(test)
        def refused(*args, **kwargs):
            missing_peer(missing)
        return refused
    return wrap
