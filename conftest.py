"""pytest wiring: the plugin streamlab installs as a `pytest11` entry point (harness/pytest_plugin.py)
makes scenarios/*.yaml scenario items, says when a long item is still running and lets only
timing-free items share the cores under xdist. Nothing else is needed here: a project of its
own gets the same from `pip install streamlab`."""
