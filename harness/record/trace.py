"""The data of a run, in one place: each client's record, the server's books, the trace that
holds both, and the figures read from them (percentiles, outcomes, goodput). Judges nothing
(harness/judge/checks.py, harness/judge/timing.py) and renders nothing (harness/judge/report.py)."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, Protocol, TypedDict

from streamlab.idle import pool_whole

# A stream that ended as asked: its length, the model's end of text, or a stop string.
NORMAL_FINISHES = ("length", "eos", "stop")


@dataclass
class StreamRecord:
    group: str
    index: int
    behaviour: str
    prompt: str
    request: dict
    sent_at: float | None = None
    head_at: float | None = None
    status: int | None = None
    request_id: str | None = None
    error_type: str | None = None  # for a refusal: the error envelope's type
    start_at: float | None = None
    prompt_tokens: int | None = None
    token_times: list[float] = field(default_factory=list)
    token_ids: list[int] = field(default_factory=list)
    text: str = ""
    finish: str | None = None  # done's finish_reason, an error event's type, or None if the client left first
    ended_at: float | None = None  # the last event (done or error) arrived
    closed_at: float | None = None  # the client closed early
    close_how: str | None = None
    bytes_read: int = 0
    failure: str | None = None  # the client itself could not do what it meant to (a timeout, a reset)
    event_ids: list[str] = field(default_factory=list)  # every SSE id read, over every connection
    cuts: list[float] = field(default_factory=list)  # a reconnector: when each connection ended early
    resumes: list[int] = field(default_factory=list)  # a reconnector: each reconnect's status (0: no connection)
    # What the wire said besides tokens, for the wire contract checks (harness/judge/wire_checks.py):
    token_indices: list[int] = field(default_factory=list)  # each token event's own index, as read (ours)
    usage: dict | None = None  # the end's usage (ours: done's; OpenAI: the usage chunk's), as sent
    after_end: int = 0  # token events read after the stream's end event
    # Its send, as planned and as due: planned_at is the schedule's (join_while: from the named
    # group's first token); due_at the same, or when a slot came free where max_clients_at_once
    # held it back by design. sent_at - due_at is how late the harness sent it.
    planned_at: float | None = None
    due_at: float | None = None

    @property
    def send_lateness(self) -> float | None:
        return None if self.sent_at is None or self.due_at is None else max(0.0, self.sent_at - self.due_at)

    @property
    def stopped_at(self) -> float | None:
        """When the stream stopped for its client: its last event, its close, or its last token."""
        return self.ended_at or self.closed_at or (self.token_times[-1] if self.token_times else None)

    @property
    def left_early(self) -> bool:
        return self.closed_at is not None and self.finish is None

    @property
    def outcome(self) -> str:
        if self.status is not None and self.status >= 500:
            return "server_error"  # never a refusal, whatever a scenario expected (issue 39)
        if self.status is not None and self.status != 200:
            return "refused"
        if self.finish is not None:
            return self.finish
        return "client_left" if self.closed_at is not None else "incomplete"

    @property
    def finished_normally(self) -> bool:
        return self.outcome in NORMAL_FINISHES


class Step(TypedDict, total=False):
    """One step of the server's step log (streamlab.hub.streams.StepRecord, as /debug/steps gives it;
    `began` on the harness clock once collected). A target's log, if any, may lack the CPU fields."""
    began: float
    seconds: float
    prefilled: int
    decoded: int
    prompt_tokens: int
    events: int
    decode_context: int
    cpu_s: float
    bytes_out: int
    cpu_waited_s: float
    cpu_waited_end_s: float


class Release(TypedDict):
    """One request's end (streamlab.hub.streams.ReleaseRecord, as /debug/releases gives it), times on
    the harness clock."""
    request_id: str
    reason: str
    completion_tokens: int
    release_step: int
    released_at: float
    closed_at: float | None
    closed_after_step: int | None


class Probe(TypedDict):
    """A target's capacity probe: N short greedy requests at once (harness.targets.watch)."""
    label: str
    clients: int
    completed: int
    ttft_p50_s: float | None


class TargetObservation(TypedDict):
    """What a target run observed from outside (harness.targets.watch.TargetWatch.finish)."""
    name: str
    profile: str
    api: str
    native_books: bool
    gauges: dict | None  # the profile's Gauges, dumped
    token_ids: bool
    refusals: dict[str, list]
    poll_s: float
    poll_errors: int
    samples: list[tuple[float, float | None, float | None, float | None]]  # (clock, running, waiting, cache_in_use)
    final: dict | None  # the last GaugeReading
    health_after: bool | None
    probe_before: Probe | None
    probe_after: Probe
    settle_note: str | None


ServerStats = dict[str, Any]  # /stats after the run drained: the engine's and hub's counters, as the server names them


@dataclass(kw_only=True)
class ServerBooks:
    """What the server's side recorded, after the run drained: a backend's collect() returns it."""
    server: ServerStats  # /stats after the run drained
    releases: list[Release]  # one per request the engine ended, times on the harness clock
    invariants: list[str]
    ledger_problems: list[str]
    steps: list[Step] = field(default_factory=list)  # the step loop's log
    failure: str | None = None  # the step loop's traceback, if it broke
    notes: list[str] = field(default_factory=list)
    step_timing: dict = field(default_factory=dict)  # simulation: real step time against the profile
    target: TargetObservation | None = None  # a target run: what was observed from outside


class RunScenario(Protocol):
    """The scenario a run ran, as the run resolved it (harness.format.scenario.Scenario): kept on
    the trace as the object, written as its JSON only when the trace is."""
    name: str

    def model_dump(self, *, mode: str) -> dict: ...

    def slos(self) -> dict[str, Any]: ...


@dataclass(kw_only=True)
class Trace(ServerBooks):
    """One run: the server's books, every client's record, and what the run was."""
    scenario: str
    mode: str
    seed: int
    spec: RunScenario | None  # None: a trace made by hand (tests)
    streams: list[StreamRecord]
    wall_s: float = 0.0
    duration_s: float = 0.0  # on the harness clock (virtual in simulation)
    references: dict = field(default_factory=dict)  # stream index -> its request run alone through the target
    # A sharded run's workers (harness.live.shards): each one's node, clients, clock offset to the
    # coordinator and that offset's bound (half its measuring round trip), loop lag.
    workers: list = field(default_factory=list)
    # The client loop's own lag over the run (live, in this process: harness.machine.lag), in ms.
    loop_lag_ms: dict = field(default_factory=dict)

    @property
    def openai_api(self) -> bool:
        """Its clients spoke an OpenAI API (a target's, or our own OpenAI route), not ours."""
        return self.target is not None and self.target.get("api") != "streamlab"

    @classmethod
    def of(cls, books: ServerBooks, **run) -> "Trace":
        return cls(**{f.name: getattr(books, f.name) for f in fields(ServerBooks)}, **run)

    @property
    def config(self) -> dict:
        """The scenario as it ran, as JSON data (what a written trace carries)."""
        return self.spec.model_dump(mode="json") if self.spec is not None else {}

    def to_json(self) -> str:
        data = asdict(replace(self, spec=None))
        data.pop("spec")
        data["config"] = self.config
        # The only fields that are not a function of the scenario and seed in simulation.
        data.pop("wall_s")
        data.pop("step_timing")
        if self.mode == "sim":
            for step in data["steps"]:
                for key in ("cpu_s", "cpu_waited_s", "cpu_waited_end_s"):  # the machine's, not the scenario's
                    step.pop(key, None)
        return json.dumps(data, indent=1, sort_keys=True, default=str)

    def group(self, name: str) -> list[StreamRecord]:
        return [s for s in self.streams if s.group == name]

    def release_by_request(self) -> dict[str, list[Release]]:
        out: dict[str, list[Release]] = {}
        for r in self.releases:
            out.setdefault(r["request_id"], []).append(r)
        return out


LEFT_BEHIND = ("blocks_reserved", "waiting", "running", "paused", "streams_registered")


# The server states a run can reach, read from its books after the run (our server's; a target's
# books say nothing of them). A search that never reaches a state cannot find its bugs: the swarm
# reports which it reached, and the library has a file for each (docs/HARNESS.md).
SERVER_STATES = ("paused", "dropped_slow", "resumed", "cancelled_waiting", "cancelled_running", "cancelled_paused",
                 "fault_injected")


def states_reached(trace: Trace) -> set[str]:
    s = trace.server
    cancelled = s.get("cancelled_while") or {}
    slow = (s.get("cancellations") or {}).get("slow_client", 0)
    reached = {"paused": s.get("streams_paused", 0), "dropped_slow": slow,
               "resumed": s.get("streams_resumed", 0), "cancelled_waiting": cancelled.get("waiting", 0),
               "cancelled_running": cancelled.get("running", 0), "cancelled_paused": cancelled.get("paused", 0),
               "fault_injected": s.get("engine_step_errors", 0)}
    return {state for state, count in reached.items() if count}


def states_line(reached: dict[str, int]) -> str:
    """The states some runs reached (state -> runs), and those none did, as one report line."""
    seen = {k: v for k, v in reached.items() if v}
    return ("server states reached (runs): " + (", ".join(f"{k} {v}" for k, v in seen.items()) or "none")
            + "; never reached: " + (", ".join(k for k in SERVER_STATES if k not in seen) or "none"))


def holds_nothing(trace: Trace) -> bool:
    """After the run drained: every block free or cached with no owner (the prefix cache's, evicted
    when admission needs the room), nothing waiting, running, paused or registered, no broken invariant."""
    s = trace.server
    return pool_whole(s) and all(s[k] == 0 for k in LEFT_BEHIND) and not trace.invariants


def percentile(values: list[float], p: float) -> float | None:
    """Nearest-rank percentile; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def interquartile_mean(values: list[float]) -> float | None:
    """The mean of the middle half of the values (each value a unit of mass, the quarters at
    either end cut off, fractions of a value included); None for no values. A group's first
    tokens come in waves, one per prefill step: over 7 streams the nearest-rank p50 is the 4th
    value and jumps a whole wave when one stream lands in the wave before (16.7 against 23.2 ms,
    live, the same server), while this moves by a seventh of it and still ignores a stall in
    the outer quarters."""
    if not values:
        return None
    ordered = sorted(values)
    n = len(ordered)
    low, high = n / 4, 3 * n / 4
    total = sum(max(0.0, min(i + 1, high) - max(i, low)) * v for i, v in enumerate(ordered))
    return total / (high - low)


def metric_values(streams: list[StreamRecord], metric: str) -> list[float]:
    if metric == "ttft_s":
        return [s.token_times[0] - s.sent_at for s in streams if s.token_times and s.sent_at is not None]
    if metric == "ttft_planned_s":  # from the planned send: a harness that sent late shows here, not above
        return [s.token_times[0] - s.due_at for s in streams if s.token_times and s.due_at is not None]
    if metric == "send_lateness_s":
        return [s.send_lateness for s in streams if s.send_lateness is not None]
    if metric == "gap_s":
        return [b - a for s in streams for a, b in zip(s.token_times, s.token_times[1:])]
    if metric == "completion_s":
        return [s.ended_at - s.sent_at for s in streams if s.ended_at is not None and s.sent_at is not None]
    raise ValueError(f"unknown metric {metric}")


def meets_slo(s: StreamRecord, slo) -> bool:
    """Finished normally, first token within slo.ttft_ms, later tokens within slo.tpot_ms each on average."""
    if slo.relative:  # a multiple of a lone request's times: only a run's probe makes it milliseconds
        raise ValueError("an SLO relative to a lone request is judged as the run resolved it (Trace.spec.slos())")
    if not s.finished_normally or not s.token_times or s.sent_at is None or s.ended_at is None:
        return False
    ttft = s.token_times[0] - s.sent_at
    if slo.ttft_ms is not None and ttft * 1e3 > slo.ttft_ms:
        return False
    if slo.tpot_ms is not None and len(s.token_times) > 1:
        tpot = (s.token_times[-1] - s.token_times[0]) / (len(s.token_times) - 1)
        if tpot * 1e3 > slo.tpot_ms:
            return False
    return True


def goodput(streams: list[StreamRecord], slo) -> dict:
    """Requests that met the SLO: their count, their share of all requests, and per second of
    the group's span (first request sent to last request ended)."""
    sent = [s.sent_at for s in streams if s.sent_at is not None]
    ends = [t for s in streams for t in (s.ended_at, s.closed_at, s.head_at) if t is not None]
    span = (max(ends) - min(sent)) if sent and ends else 0.0
    good = sum(meets_slo(s, slo) for s in streams)
    return {"good": good, "requests": len(streams), "fraction": good / len(streams) if streams else 0.0,
            "span_s": span, "per_s": good / span if span > 0 else 0.0}


def outcomes(streams: list[StreamRecord]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for s in streams:
        counts[s.outcome] = counts.get(s.outcome, 0) + 1
    return dict(sorted(counts.items()))
