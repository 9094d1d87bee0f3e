"""A server the harness starts leaves a core for its event loop and the load (harness.machine.cores)."""

from __future__ import annotations

import pytest

import asyncio
import os

from harness.machine.cores import server_threads
from harness.live.process import ServerProcess
from harness.machine.cores import torch_threads

# Times nothing (read for it): may run beside another such item under xdist (harness/cores_lock.py).
pytestmark = pytest.mark.shares_cores


def test_a_server_gets_a_torch_thread_fewer_than_the_cores(monkeypatch):
    assert server_threads() == max(1, len(os.sched_getaffinity(0)) - 1)
    monkeypatch.setenv("STREAMLAB_SERVER_THREADS", "3")
    assert server_threads() == 3


def test_the_live_server_runs_with_that_many_torch_threads():
    async def threads() -> int:
        async with ServerProcess(["--log-level", "warning"]) as server:
            return (await server.get_json("/debug/sizes"))["torch_threads"]

    assert asyncio.run(threads()) == server_threads()


def test_calibration_measures_the_engine_with_the_same_threads():
    import torch

    before = torch.get_num_threads()
    with torch_threads(server_threads()):
        assert torch.get_num_threads() == server_threads()
    assert torch.get_num_threads() == before
