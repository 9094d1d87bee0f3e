"""pytest plugin: every scenario file (by default each *.yaml in a folder named `scenarios`, or the
globs of the `streamlab_scenarios` ini option) becomes items scenario[<name>-sim] and
scenario[<name>-live]. Installed with streamlab as a `pytest11` entry point (harness/pytest_plugin.py).

`pytest -k scenario`, `pytest -k "scenario and sim"` and `pytest -k slow_reader` select them.
A file with a mistake is a collection error naming the file, line and field. The session owns
the RunContext every item runs with (config.stash): no verdict depends on module state.
Under pytest-xdist (`-n 2`) simulated items (a virtual clock: nothing they judge is timed on
this machine) share the cores with each other; a live item has the machine to itself, each with
its own server port and Toxiproxy (harness.cores_lock).
"""

from __future__ import annotations

from fnmatch import fnmatch
from pathlib import Path

import pytest

from harness.format.scenario import Scenario
from harness.format.load import ScenarioError, load

MODES = ("sim", "live")
CONTEXT = pytest.StashKey["RunContext"]()
COMPARING = pytest.StashKey[tuple]()  # --compare-baseline: (the two sides, the gate's settings)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini("streamlab_scenarios", type="linelist", default=[],
                  help="globs of scenario files, relative to the rootdir, `*` matching across folders (default: "
                       "every *.yaml in a folder named `scenarios`)")
    group = parser.getgroup("streamlab scenarios")
    group.addoption("--target", default=None, help="live items aim at this target (a name such as "
                    "transformers-serve or streamlab-openai, or a URL: http or https, another host with --allow-remote) instead "
                    "of each scenario's own server")
    group.addoption("--target-api", default=None, help="with --target URL: openai-completions (default), openai-chat")
    group.addoption("--target-model", default=None, help="with --target URL: the model name (default: /v1/models)")
    group.addoption("--target-profile", default=None, help="what the target lets us observe: vllm, tgi, sglang, "
                    "llamacpp, llamacpp-slots, transformers-serve, generic (default for a URL)")
    group.addoption("--allow-remote", action="append", default=[], metavar="HOST",
                    help="consent: live items may aim at HOST, a server you run that is not this machine's loopback "
                         "(repeat for more; or STREAMLAB_ALLOW_REMOTE=HOST,...)")
    group.addoption("--ca-file", default=None, help="with an https --target: verify its certificate against these CAs")
    group.addoption("--insecure", action="store_true", help="with an https --target: do not verify its certificate")
    group.addoption("--compare-baseline", default=None, metavar="SIDE",
                    help="every live item becomes a comparison (streamlab scenario compare): this side against "
                         "--compare-candidate in interleaved rounds; fails on a regression or outcomes that differ")
    group.addoption("--compare-candidate", default="here", metavar="SIDE", help="with --compare-baseline (default: here)")
    group.addoption("--compare-rounds", type=int, default=16, help="with --compare-baseline: rounds per item (default 16)")


def pytest_configure(config: pytest.Config) -> None:
    from harness.machine import reach
    reach.consent(config.getoption("--allow-remote", None) or [])
    if config.getoption("--compare-baseline", None):  # a mistake in a side stops the run before any item
        from harness.compare.gate import Settings
        from harness.compare.sides import SideError, parse_side
        try:
            sides = {"baseline": parse_side(config.getoption("--compare-baseline")),
                     "candidate": parse_side(config.getoption("--compare-candidate"))}
            settings = Settings(rounds=config.getoption("--compare-rounds"))
            settings.check()
        except (SideError, ValueError) as exc:
            raise pytest.UsageError(f"--compare-baseline/--compare-candidate/--compare-rounds: {exc}") from None
        config.stash[COMPARING] = (sides, settings)  # parsed once (a ref's worktree is made here), read by each item
    config.addinivalue_line("markers", "sim: a scenario run in deterministic simulation")
    config.addinivalue_line("markers", "live: a scenario run against the real server through Toxiproxy")
    config.addinivalue_line("markers", "scenario: a YAML scenario")


def run_context(config: pytest.Config):
    """The session's RunContext, made on first use."""
    from harness.run.runner import RunContext

    if CONTEXT not in config.stash:
        from harness.format.target import resolve_target

        target = config.getoption("--target")
        config.stash[CONTEXT] = RunContext(target=None if target is None else resolve_target(
            target, config.getoption("--target-api"), config.getoption("--target-model"),
            config.getoption("--target-profile"), config.getoption("--ca-file"), config.getoption("--insecure")))
    return config.stash[CONTEXT]


def pytest_unconfigure(config: pytest.Config) -> None:
    if CONTEXT in config.stash:
        config.stash[CONTEXT].close()  # a command target's server, kept across the session's runs


def is_scenario_file(file_path: Path, rootdir: Path, globs: list[str]) -> bool:
    """A scenario file by the `streamlab_scenarios` globs, or by default any *.yaml in a folder
    named `scenarios` (a project's own, wherever it is)."""
    if file_path.suffix not in (".yaml", ".yml"):
        return False
    if not globs:
        return file_path.parent.name == "scenarios"
    try:
        relative = file_path.resolve().relative_to(rootdir.resolve())
    except ValueError:
        return False
    return any(fnmatch(relative.as_posix(), g) for g in globs)  # fnmatch's `*` spans folders too


def pytest_collect_file(file_path: Path, parent: pytest.Collector):
    config = parent.config
    if is_scenario_file(file_path, config.rootpath, config.getini("streamlab_scenarios")):
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
            if mode == "sim":
                item.add_marker(pytest.mark.shares_cores)
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
        from harness.run.runner import fitted_model, refused_here, run_scenario

        ctx = run_context(self.config)
        reason = refused_here(self.scenario, self.mode, ctx)
        if reason:
            pytest.skip(reason)
        if self.mode == "live" and COMPARING in self.config.stash:
            return self._compare(ctx)
        model = fitted_model(self.scenario, ctx) if self.mode == "live" else None
        if model is not None and model not in getattr(ctx.backends.get("sim@machine"), "profiles", {}):
            # Parity and the live gate are judged against this machine's profile, as in the
            # suite: fitted on the first such item (cached for the next sessions).
            from harness.fit.machine import use_machine_profile
            use_machine_profile(ctx, [model], say=self._say)
        outcome = run_scenario(self.scenario, self.mode, ctx)
        self.user_properties.append(("checks", [c.line() for c in outcome.checks]))
        if not outcome.ok:
            raise ScenarioFailure("\n".join(outcome.failures()))

    def _compare(self, ctx) -> None:
        """This live item as a comparison of two sides (harness.compare), judged as the command judges."""
        from harness.compare import report
        from harness.compare.gate import finish, gate_scenario

        sides, settings = self.config.stash[COMPARING]
        gate = gate_scenario(self.scenario, sides, settings, ctx.references, self._say)
        if gate.refused:  # it cannot run here (a side's server, a live run)
            pytest.skip(gate.refused)
        finish([gate], settings)  # each item its own gate: its figures one family (too few rounds: it fails)
        labels = (sides["baseline"].label, sides["candidate"].label)
        self.user_properties.append(("compare", report.as_json([gate], labels, settings)))
        if report.exit_code([gate]) != report.PASS:
            raise ScenarioFailure(report.markdown([gate], labels, settings))

    def _say(self, line: str) -> None:
        """A line to the terminal while the item runs (the machine fit's progress), past capture."""
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(f"  {self.name}: {line}")

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, ScenarioFailure):
            return f"scenario {self.scenario.name} [{self.mode}] failed its checks:\n{excinfo.value}"
        return super().repr_failure(excinfo, style)

    def reportinfo(self):
        return self.path, 0, f"scenario {self.scenario.name} [{self.mode}]"
