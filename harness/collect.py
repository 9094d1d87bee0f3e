"""pytest plugin: every scenarios/*.yaml becomes items scenario[<name>-sim] and scenario[<name>-live].

`pytest -k scenario`, `pytest -k "scenario and sim"` and `pytest -k slow_reader` select them.
A file with a mistake is a collection error naming the file, line and field.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.scenario import Scenario, ScenarioError, load

MODES = ("sim", "live")
SCENARIOS_DIR = Path(__file__).resolve().parent.parent / "scenarios"


def load_by_name(name: str) -> Scenario:
    return load(SCENARIOS_DIR / f"{name}.yaml")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "sim: a scenario run in deterministic simulation")
    config.addinivalue_line("markers", "live: a scenario run against the real server through Toxiproxy")
    config.addinivalue_line("markers", "scenario: a YAML scenario")


def pytest_sessionfinish(session: pytest.Session) -> None:
    from harness.live_run import stop_shared
    stop_shared()


def pytest_collect_file(file_path: Path, parent: pytest.Collector):
    if file_path.suffix in (".yaml", ".yml") and file_path.parent.name == "scenarios":
        return ScenarioFile.from_parent(parent, path=file_path)
    return None


class ScenarioFile(pytest.File):
    def collect(self):
        try:
            scenario = load(self.path)
        except ScenarioError as exc:
            raise self.CollectError(str(exc)) from None
        for mode in MODES:
            item = ScenarioItem.from_parent(self, name=f"scenario[{scenario.name}-{mode}]", scenario=scenario,
                                            mode=mode)
            item.add_marker(pytest.mark.scenario)
            item.add_marker(getattr(pytest.mark, mode))
            if mode not in scenario.modes:
                item.add_marker(pytest.mark.skip(reason=f"{scenario.name} does not run in {mode} mode"))
            yield item


class ScenarioFailure(Exception):
    pass


class ScenarioItem(pytest.Item):
    def __init__(self, *, scenario: Scenario, mode: str, **kwargs) -> None:
        super().__init__(**kwargs)
        self.scenario = scenario
        self.mode = mode

    def runtest(self) -> None:
        from harness.runner import run_scenario

        if self.mode == "live":
            from harness.live_run import live_unavailable
            reason = live_unavailable(self.scenario)
            if reason:
                pytest.skip(reason)
        outcome = run_scenario(self.scenario, self.mode, load_by_name)
        self.user_properties.append(("checks", [c.line() for c in outcome.checks]))
        if not outcome.ok:
            raise ScenarioFailure("\n".join(outcome.failures()))

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, ScenarioFailure):
            return f"scenario {self.scenario.name} [{self.mode}] failed its checks:\n{excinfo.value}"
        return super().repr_failure(excinfo, style)

    def reportinfo(self):
        return self.path, 0, f"scenario {self.scenario.name} [{self.mode}]"
