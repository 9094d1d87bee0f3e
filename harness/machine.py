"""This machine's cost model, for parity and the live gate: fitted here, cached, refitted when
the machine moved.

`streamlab scenario calibrate` fits a whole profile (engine terms in-process, serving terms from
live runs of scenarios/calibration/) and writes the committed one. The same fit, made on the
machine that runs the live scenarios (five rounds, 5-8 minutes on 2 cores, the transport terms kept
from the committed file), is what a live run is judged against: the committed profile describes
another machine. It is cached in .tools/profiles/ with what it was fitted under: the machine's
name, its CPU quota (a cgroup's quota makes another machine, `scripts/dev slow`), the yardstick's
time (harness/speed.py) and when. A cached fit is used while the yardstick reads within REFIT of
its time then and the fit is younger than MAX_AGE_S; otherwise the machine is fitted again.
So `scenario run FILE`, a pytest item and the suite judge against the same profile.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

from harness import speed
from harness.cpu_quota import cpu_quota
from harness.profile import StepCostProfile, load_profile, machine_name
from harness.simulation import SimBackend

if TYPE_CHECKING:
    from harness.runner import RunContext

CACHE = Path(__file__).resolve().parent.parent / ".tools" / "profiles"
ROUNDS = 5  # rounds of live calibration runs: at 3 the small-batch serving terms still moved 0.2-0.7 ms between rounds
# The yardstick's readings on one idle machine spread by about 5% (min to max of ten readings
# here); a move past 15% is the machine, not the reading.
REFIT = 1.15
# One machine's speed drifts 1.1-1.45x within hours (the serving terms more than the engine's),
# and the yardstick sees only the engine's: an hour-old fit is made again.
MAX_AGE_S = 3600.0
# How the fit is made; a fit cached by another way is made again. 2: per_request_s fitted through
# the simulation (harness.calibrate.fit_per_request), not as a burst's head span over its heads.
# 3: a byte's cost split into the server's write and the client's read (harness.calibrate.fit_bytes);
# 4: the read does not wait for the server's queued work (harness.simulation.ServerCore.share);
# 5: a refused request's own core time (refused_request_s, from cal_refused);
# 6: timers due at one virtual moment run in the order they were set (harness.clock), so a
# burst's requests reach the simulated core in the order they were sent, as cal_batch_* sends them.
# 7: a client records an event when its bytes arrived (the kernel's receive stamp live, the pipe's
# arrival in simulation), not when it read them (harness.clients.Client.note).
FIT = 7


def fitted_under() -> dict:
    return {"machine": machine_name(), "cpu_quota": cpu_quota(), "fit": FIT}


def machine_profile(model: str, say=print, refit: bool = False) -> StepCostProfile:
    """This machine's profile of `model`: the cached fit while it still describes the machine,
    otherwise a new fit (5-8 minutes on 2 cores), cached."""
    quota = cpu_quota()
    path = CACHE / (f"{model}.json" if quota is None else f"{model}@quota{quota:g}.json")  # a quota: another machine
    reason = "no fit cached for this machine" if not path.exists() else "asked to refit" if refit else None
    if reason is None:
        data = json.loads(path.read_text())
        under = data.get("fitted_under", {})
        now = speed.measure(model)
        then = (data.get("reference_s") or {}).get("step_s")
        if {k: under.get(k) for k in ("machine", "cpu_quota", "fit")} != fitted_under():
            reason = f"the cached fit was made on {under}, this is {fitted_under()}"
        elif not then or not 1 / REFIT <= now.step_s / then <= REFIT:
            reason = f"the yardstick moved {now.step_s / then if then else float('nan'):.2f}x since the fit"
        elif time.time() - under.get("at", 0) > MAX_AGE_S:
            reason = f"the cached fit is {(time.time() - under.get('at', 0)) / 60:.0f} minutes old"
        else:
            return load_profile(model, path)
    say(f"fitting this machine's cost model for {model} ({reason}; 5-8 minutes on 2 cores, cached in {CACHE})")
    from harness.calibrate import calibrate  # the fit runs scenarios: the runner, which reads this module's output

    profile = calibrate(model, say=lambda line: None, repeats=ROUNDS, measure_transport=False)
    CACHE.mkdir(parents=True, exist_ok=True)
    data = {**asdict(profile), "fitted_under": {**fitted_under(), "at": time.time()}}
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    tmp.replace(path)  # atomic: a second process reads the old file or the new one
    return profile


def compared_with_committed(fresh: StepCostProfile) -> str:
    """One line: this machine's fit over the committed profile, term by term (reported)."""
    old = load_profile(fresh.model)
    yard = ""
    if old.reference_s.get("step_s") and fresh.reference_s.get("step_s"):
        yard = f"yardstick {fresh.reference_s['step_s'] / old.reference_s['step_s']:.2f}x; "
    return (f"{fresh.model}: this machine / committed profile: {yard}engine decode step at batch 1 "
            f"{fresh.decode_cost(1) / old.decode_cost(1):.2f}x, at 32 {fresh.decode_cost(32) / old.decode_cost(32):.2f}x; "
            f"step with 8 events served {fresh.served_decode(8) / old.served_decode(8):.2f}x; "
            f"per request {fresh.per_request_s / max(old.per_request_s, 1e-9):.2f}x")


def use_machine_profile(ctx: "RunContext", models: list[str], say=print, refit: bool = False) -> list[StepCostProfile]:
    """Judge live runs (parity, the live gate) against a simulation under this machine's profile
    (harness.machine: fitted here, cached, refitted when the machine moved). The committed profile
    still drives the "sim" runs, so the simulated checks and their tight gate stay deterministic."""
    profiles = [machine_profile(m, say=say, refit=refit) for m in models]
    backend = ctx.backends.get("sim@machine")
    known = dict(backend.profiles) if isinstance(backend, SimBackend) else {}
    ctx.backends["sim@machine"] = SimBackend(*known.values(), *profiles)
    ctx.parity_mode = "sim@machine"
    return profiles
