"""The pytest plugin streamlab installs (the `pytest11` entry point in pyproject.toml): with
streamlab installed, `pytest -k scenario` in any project collects its scenario files, as it does
here. Scenario files become items (harness/collect.py: every *.yaml in a folder named
`scenarios`, or the globs of the `streamlab_scenarios` ini option); a long item says it is still
running (harness/progress.py); under xdist only timing-free items share the cores
(harness/cores_lock.py)."""

pytest_plugins = ["harness.collect", "harness.progress", "harness.cores_lock"]
