"""pytest wiring: scenarios/*.yaml become scenario items (see harness/collect.py)."""

pytest_plugins = ["harness.collect"]
