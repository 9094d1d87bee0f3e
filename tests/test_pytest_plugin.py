"""The pytest plugin streamlab installs (harness/pytest_plugin.py, a `pytest11` entry point): a
project of its own, outside this repository and with no conftest.py, gets `pytest -k scenario` on
its own scenario files from a pip install of streamlab, aimed at a server of its own."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from streamlab.app import create_app
from streamlab.config import ServiceConfig
from tests.live import AppServer, running

REPO = Path(__file__).resolve().parent.parent

SCENARIO = """\
name: hello
description: two readers against the project's own server
modes: [live]
seed: 1
target: {{url: "{url}", api: streamlab, profile: streamlab}}
groups:
  - name: readers
    count: 2
    prompt: {{tokens: [8, 16]}}
    request: {{max_new_tokens: 8}}
    behaviour: {{kind: reader}}
expect:
  finish_reasons: {{readers: {{length: 2}}}}
"""


def pip(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", "-q", *args], check=True,
                   capture_output=True, text=True, timeout=600)


def test_a_project_of_its_own_runs_its_scenario_files_with_pytest_after_pip_install(tmp_path, tiny):
    # streamlab as pip installs it (a wheel of this checkout, into a folder of its own): not this
    # checkout's sources, not its conftest.py
    pip("wheel", "--no-deps", "--no-build-isolation", "-w", str(tmp_path / "wheels"), str(REPO))
    wheel = next((tmp_path / "wheels").glob("streamlab-*.whl"))
    pip("install", "--no-deps", "--target", str(tmp_path / "site"), str(wheel))
    project = tmp_path / "project"
    (project / "checks").mkdir(parents=True)
    (project / "pytest.ini").write_text("[pytest]\nstreamlab_scenarios = checks/*.yaml\n")
    with running(AppServer(create_app(ServiceConfig(debug=True), tiny))) as server:
        (project / "checks" / "hello.yaml").write_text(SCENARIO.format(url=server.url))
        env = {**os.environ, "PYTHONPATH": str(tmp_path / "site"),
               "TOXIPROXY_SERVER": str(REPO / ".tools" / "bin" / "toxiproxy-server")}
        # -p no:xdist: a project without pytest-xdist (the plugin's xdist hook is optional)
        done = subprocess.run([sys.executable, "-m", "pytest", "-k", "scenario", "-p", "no:cacheprovider", "-p",
                               "no:xdist", "-v",
                               "-c", str(project / "pytest.ini")], cwd=project, env=env, capture_output=True,
                              text=True, timeout=300)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-3000:]
    assert "checks/hello.yaml::scenario[hello-live] PASSED" in out, out[-3000:]
    assert "scenario[hello-sim] SKIPPED" in out, out[-3000:]
    assert not (project / "conftest.py").exists()
    # the wheel carries the scenario library and the built-in profiles (the probe and the suite read them)
    site = tmp_path / "site"
    assert (site / "scenarios" / "bad_requests.yaml").exists() and (site / "scenarios" / "baselines.json").exists()
    assert (site / "harness" / "format" / "profiles" / "vllm.yaml").exists()
    # the plugin came from the installed wheel, not from this checkout
    where = subprocess.run([sys.executable, "-c", "import harness.collect as c; print(c.__file__)"], cwd=project,
                           env=env, capture_output=True, text=True, timeout=60).stdout
    assert where.startswith(str(tmp_path / "site")), where


def test_scenario_files_by_default_are_in_a_folder_named_scenarios_and_otherwise_by_the_ini_globs(tmp_path):
    from harness.collect import is_scenario_file

    assert is_scenario_file(tmp_path / "scenarios" / "a.yaml", tmp_path, [])
    assert not is_scenario_file(tmp_path / "checks" / "a.yaml", tmp_path, [])
    assert is_scenario_file(tmp_path / "checks" / "a.yaml", tmp_path, ["checks/*.yaml"])
    assert is_scenario_file(tmp_path / "checks" / "deep" / "a.yml", tmp_path, ["checks/*"])
    assert not is_scenario_file(tmp_path / "scenarios" / "a.yaml", tmp_path, ["checks/*.yaml"])
    assert not is_scenario_file(tmp_path / "checks" / "a.py", tmp_path, ["checks/*"])
