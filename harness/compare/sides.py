"""What a side of a comparison is, and the scenario and backend it runs a scenario with.

    here                       our server from this working tree, as each scenario says
    here:KEY=VALUE,...         the same with server options changed (any `server:` field of the
                               format, e.g. here:max_batch=8 or here:lab=true,lab_step_slowdown=1.25)
    ref:REV[:KEY=VALUE,...]    our server from git revision REV, checked out into a worktree of
                               its own (.tools/compare/<sha>) and started from there
    llamacpp -t 1              a target by name (harness/format/target.py), its command's extra
                               arguments after it
    cmd:COMMAND ARGS           any server command, with {port} (and the target placeholders) filled
                               in; spoken to on /v1/completions, observed as a generic server
    http://127.0.0.1:8000      a server already running (then the same server on both sides only
                               for an A/A run: one server up at a time is the caller's to keep)

The clients, Toxiproxy and every check are this tree's on both sides: only the server differs.
"""

from __future__ import annotations

import shlex
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from harness.format.scenario import Scenario, ServerSpec
from harness.format.target import TARGETS, Target, resolve_target
from harness.live.backend import LiveBackend

REPO = Path(__file__).resolve().parents[2]
WORKTREES = REPO / ".tools" / "compare"


class SideError(ValueError):
    """A side that cannot be run as written: the gate exits 2 (could not run)."""


@dataclass
class Side:
    label: str  # as the user wrote it
    server: dict = field(default_factory=dict)  # our server's options changed (own server sides)
    target: Target | None = None  # another server; None: ours
    source: Path | None = None  # our server's code from this folder (a ref's worktree); None: this tree

    @property
    def ours(self) -> bool:
        return self.target is None

    def scenario_for(self, scenario: Scenario) -> Scenario:
        """The scenario as this side runs it: its server options changed, validated by the format."""
        if not self.server:
            return scenario
        try:
            checked = ServerSpec.model_validate({**scenario.server.model_dump(), **self.server})
        except ValueError as exc:
            raise SideError(f"{self.label}: {exc}") from None
        # model_copy keeps which options were written (a ref's server is given only those)
        server = scenario.server.model_copy(update={k: getattr(checked, k) for k in self.server})
        return scenario.model_copy(update={"server": server})

    def backend(self, fresh_process: bool) -> LiveBackend:
        """A backend for one run (the caller closes it after, so one server is up at a time).
        fresh_process: our server started as its own process, never forked from this one's
        imports, as a ref's must be; both sides start alike when either is a ref."""
        if self.target is not None:
            return LiveBackend(self.target)
        return LiveBackend(source=self.source or (REPO if fresh_process else None))


def parse_options(text: str, label: str) -> dict:
    """KEY=VALUE,... as server options; values read as YAML scalars (true, 8, 1.25, fifo)."""
    out = {}
    for part in filter(None, text.split(",")):
        key, eq, value = part.partition("=")
        if not eq or not key.strip():
            raise SideError(f"{label}: {part!r} is not KEY=VALUE (a server option of the scenario format)")
        if key.strip() not in ServerSpec.model_fields:
            raise SideError(f"{label}: unknown server option {key.strip()!r}; expected one of "
                            f"{', '.join(sorted(ServerSpec.model_fields))}")
        out[key.strip()] = yaml.safe_load(value)
    return out


def worktree(rev: str, label: str) -> Path:
    """REV checked out (detached) into .tools/compare/<sha>, once; the folder."""
    try:
        sha = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--verify", f"{rev}^{{commit}}"], check=True,
                             capture_output=True, text=True).stdout.strip()
    except (subprocess.CalledProcessError, OSError) as exc:
        raise SideError(f"{label}: {rev!r} is not a git revision of {REPO}: "
                        f"{getattr(exc, 'stderr', '') or exc}".strip()) from None
    where = WORKTREES / sha[:12]
    if not (where / "streamlab").is_dir():
        WORKTREES.mkdir(parents=True, exist_ok=True)
        subprocess.run(["git", "-C", str(REPO), "worktree", "prune"], check=False, capture_output=True)
        done = subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", "--force", str(where), sha],
                              capture_output=True, text=True)
        if done.returncode != 0:
            raise SideError(f"{label}: git worktree add failed: {done.stderr.strip()}")
    return where


def parse_side(spec: str) -> Side:
    spec = spec.strip()
    if spec == "here" or spec.startswith("here:"):
        return Side(spec, server=parse_options(spec[5:], spec))
    if spec.startswith("ref:"):
        rev, _, options = spec[4:].partition(":")
        if not rev:
            raise SideError(f"{spec}: ref:REV needs a git revision")
        return Side(spec, server=parse_options(options, spec), source=worktree(rev, spec))
    if spec.startswith("cmd:"):
        command = shlex.split(spec[4:])
        if not any("{port}" in part for part in command):
            raise SideError(f"{spec}: a server command needs {{port}} where the server's port goes")
        return Side(spec, target=Target(name="cmd", profile="generic", api="openai-completions", command=command))
    if "://" in spec:
        try:
            return Side(spec, target=resolve_target(spec))
        except ValueError as exc:
            raise SideError(f"{spec}: {exc}") from None
    name, *extra = shlex.split(spec)
    if name not in TARGETS or name.startswith("streamlab"):
        raise SideError(f"{spec}: a side is here[:OPTIONS], ref:REV[:OPTIONS], cmd:COMMAND, a URL, or a target "
                        f"({', '.join(t for t in TARGETS if not t.startswith('streamlab'))}) with extra arguments")
    base = TARGETS[name]
    return Side(spec, target=base.model_copy(update={"name": name, "command": [*base.command, *extra]}))
