"""A git revision made for the lab: HEAD's tree with a slower engine step written into its source,
as a commit no branch names. The gate is then asked `ref:HEAD` against `ref:<sha>`, as a team
would ask it of a real change (tests/test_compare.py, benchmarks/compare_gate.py)."""

from __future__ import annotations

import os
import subprocess
import tempfile

from harness.compare.sides import REPO, WORKTREES

ENGINE = "streamlab/engine/engine.py"


def waiting_step(factor: float) -> str:
    """The step waits (factor - 1) of its own wall time again: a lock, a blocking call or a device
    sync look the same, and a CPU-time reading does not see it."""
    return f'''

# Written by harness/compare/lab_revision.py into a commit of its own: a step {factor:g}x slower by waiting.
_computed_step = BatchEngine.step


def _waiting_step(self, *args, **kwargs):
    began = time.perf_counter()
    out = _computed_step(self, *args, **kwargs)
    time.sleep({factor - 1:g} * (time.perf_counter() - began))
    return out


BatchEngine.step = _waiting_step
'''


def computing_step(factor: float) -> str:
    """The step computes (factor - 1) of its own CPU time again, as a slower kernel would."""
    return f'''

# Written by harness/compare/lab_revision.py into a commit of its own: a step {factor:g}x slower by computing.
_computed_step = BatchEngine.step


def _computing_step(self, *args, **kwargs):
    cpu0 = time.thread_time()
    out = _computed_step(self, *args, **kwargs)
    busy({factor - 1:g} * (time.thread_time() - cpu0))
    return out


BatchEngine.step = _computing_step
'''


def commit_with(extra: str, path: str = ENGINE, message: str = "lab: a slower step") -> str:
    """The sha of a commit of HEAD's tree with `extra` appended to `path`, parent HEAD, on no
    branch; the working tree and the index are left as they are (a private index file)."""
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "GIT_INDEX_FILE": os.path.join(tmp, "index"), "GIT_AUTHOR_NAME": "streamlab lab",
               "GIT_AUTHOR_EMAIL": "lab@localhost", "GIT_COMMITTER_NAME": "streamlab lab",
               "GIT_COMMITTER_EMAIL": "lab@localhost"}

        def git(*args: str, stdin: str | None = None) -> str:
            return subprocess.run(["git", "-C", str(REPO), *args], input=stdin, env=env, check=True,
                                  capture_output=True, text=True).stdout.strip()
        git("read-tree", "HEAD")
        blob = git("hash-object", "-w", "--stdin", stdin=git("show", f"HEAD:{path}") + "\n" + extra)
        git("update-index", "--cacheinfo", f"100644,{blob},{path}")
        return git("commit-tree", git("write-tree"), "-p", "HEAD", "-m", message)


def remove_worktrees(*revs: str) -> None:
    """Remove the gate's worktrees of these revisions (a lab commit's would pile up otherwise)."""
    for rev in revs:
        sha = subprocess.run(["git", "-C", str(REPO), "rev-parse", rev], capture_output=True, text=True).stdout
        subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(WORKTREES / sha.strip()[:12])],
                       capture_output=True)
