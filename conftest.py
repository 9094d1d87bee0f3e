"""pytest wiring: scenarios/*.yaml become scenario items (harness/collect.py); a long item says
it is still running (harness/progress.py); under xdist only timing-free items share the cores
(harness/cores_lock.py)."""

pytest_plugins = ["harness.collect", "harness.progress", "harness.cores_lock"]
