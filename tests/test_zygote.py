"""`streamlab serve` forked from an imported one (harness.live.zygote): each start is still a process of
its own, started with the environment it was given, and it ends as a Popen'd one does."""

from __future__ import annotations

import os
import signal

import pytest

from harness.live import zygote
from harness.live.process import ServerProcess

# Times nothing (read for it): may run beside another such item under xdist (harness/cores_lock.py).
pytestmark = [pytest.mark.asyncio, pytest.mark.shares_cores]


async def test_a_forked_server_is_its_own_process_and_ends_clean_on_sigterm():
    server = ServerProcess(["--model", "tiny", "--log-level", "info"])
    assert server.forked()
    await server.start()
    try:
        sizes = await server.get_json("/debug/sizes")
        assert server.proc.pid != os.getpid() and server.proc.poll() is None
        # OMP_NUM_THREADS is read once, at torch's import: the zygote was started with the server's.
        assert sizes["torch_threads"] == int(server.env["OMP_NUM_THREADS"]), sizes
    finally:
        code = server.stop()
    # uvicorn re-raises the signal after its graceful shutdown: "killed by SIGTERM" or 0, as with Popen.
    assert code in (0, -signal.SIGTERM)
    assert "streamlab: engine clean at shutdown" in server.log_tail(50), server.log_tail(50)


async def test_a_start_with_another_environment_gets_a_zygote_of_its_own(tmp_path, monkeypatch):
    mark = tmp_path / "imported"
    (tmp_path / "sitecustomize.py").write_text(f"open({str(mark)!r}, 'w').close()\n")
    plain = ServerProcess(["--model", "tiny"])
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    marked = ServerProcess(["--model", "tiny"])
    for server in (plain, marked):
        await server.start()
    try:
        keys = {key for key in zygote._zygotes if dict(key[1]).get("PYTHONPATH", "").startswith(str(tmp_path))}
        assert len(keys) == 1, "the changed PYTHONPATH started a zygote of its own"
        assert plain.proc.zygote is not marked.proc.zygote
        assert mark.exists(), "the new zygote's interpreter ran the sitecustomize on that PYTHONPATH"
    finally:
        plain.stop()
        marked.stop()


async def test_a_server_that_exits_at_start_up_is_reported_with_its_code():
    server = ServerProcess(["--model", "no-such-model"])
    with pytest.raises(RuntimeError, match="exited with 2"):
        await server.start()
    assert server.proc.returncode == 2


async def test_one_zygote_is_kept_while_the_environment_changes_between_items(monkeypatch):
    """pytest sets PYTEST_CURRENT_TEST for every item: that started a zygote per item (0.4 GB
    each) until a CI run was killed for memory. A changed variable that matters gets a new zygote,
    and the idle one before it is ended."""
    for item in range(3):
        monkeypatch.setenv("PYTEST_CURRENT_TEST", f"item {item}")
        server = ServerProcess(["--model", "tiny"])
        await server.start()
        server.stop()
    assert len(zygote._zygotes) == 1
    before = next(iter(zygote._zygotes.values()))
    monkeypatch.setenv("STREAMLAB_ZYGOTE_TEST", "another environment")
    server = ServerProcess(["--model", "tiny"])
    await server.start()
    server.stop()
    assert len(zygote._zygotes) == 1 and before.proc.poll() is not None, "the idle zygote was ended"
