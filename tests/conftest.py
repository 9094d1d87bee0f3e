"""Shared fixtures: the tiny model is built once per session (it is deterministic)."""

from __future__ import annotations

import pytest

from streamlab.config import CacheConfig, EngineConfig
from streamlab.engine.engine import BatchEngine
from streamlab.models import LoadedModel, load_model


@pytest.fixture(scope="session")
def tiny() -> LoadedModel:
    return load_model("tiny")


@pytest.fixture
def make_engine(tiny: LoadedModel):
    def make(max_batch: int = 8, num_blocks: int = 256, block_size: int = 16) -> BatchEngine:
        return BatchEngine(tiny.model, EngineConfig(max_batch=max_batch, cache=CacheConfig(num_blocks, block_size)))
    return make


@pytest.fixture(scope="module")
def overlap_4():
    """overlap_4 and its simulated trace (test_timing, test_drift, test_pace)."""
    from harness.format.load import load_by_name
    from harness.run import once

    scenario = load_by_name("overlap_4")
    return scenario, once.simulate(scenario)[0]
