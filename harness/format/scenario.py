"""The scenario format: pydantic models, load(), and errors that name the file, line and field.

One scenario per YAML file, its `name` equal to the file's stem. `scenarios/schema.json` is
generated from these models (`streamlab scenario schema --write`) for editors; a test keeps it current.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, create_model, field_validator, model_validator

from harness.format.arrivals import Arrival, AtOnce, JoinWhile, TraceArrival
from harness.format.behaviours import Behaviour
from harness.format.expect import Expectations
from harness.format.strict import FieldProblem, FieldProblems, Strict
from harness.format.toxics import ToxicSpec
from harness.format.target import Target
from streamlab.config import ServiceConfig
from streamlab.options import SERVE_OPTIONS, ServeOption, serve_args, service_config
from streamlab.policies import Policy
from streamlab.presets import PRESETS
from harness.format.trace_arrivals import TraceFileError

SCENARIOS_DIR = Path(__file__).resolve().parents[2] / "scenarios"


# ---- the server ----

def _server_field(option: ServeOption):
    annotation = Policy if option.name == "policy" else (
        Literal[option.choices] if option.choices else option.type)  # type: ignore[valid-type]
    default = Policy(option.default) if option.name == "policy" else option.default
    return annotation, Field(default, description=f"{option.flag}: {option.help}", **option.bounds)


# Engine and service configuration, as `streamlab serve` takes it: one field per serve option,
# with the server's own default (streamlab/options.py states each once).
_ServerSpecBase = create_model("_ServerSpecBase", __base__=Strict,
                               **{o.name: _server_field(o) for o in SERVE_OPTIONS})


class ProxySpec(Strict):
    """A reverse proxy the harness puts between Toxiproxy and the server (live only)."""
    kind: Literal["nginx"] = "nginx"
    tls: bool = Field(False, description="TLS to the client, with a self-signed certificate made at set-up")
    http2: bool = Field(False, description="HTTP/2 to the client (over TLS, as browsers speak it)")
    read_timeout_s: float = Field(60.0, gt=0, description="proxy_read_timeout: an idle upstream is cut after this "
                                  "(under about 0.3 s nginx cuts a sending one too: its timers move only by 300 ms or more)")
    buffering: bool = Field(True, description="proxy_buffering (nginx's default: on)")
    honour_accel_buffering: bool = Field(True, description="false: nginx ignores the server's X-Accel-Buffering: no")

    @model_validator(mode="after")
    def _tls(self) -> "ProxySpec":
        if self.http2 and not self.tls:
            raise ValueError("http2 needs tls: browsers and the harness's HTTP/2 client speak it over TLS only")
        if self.tls and not self.http2:
            raise ValueError("tls without http2: the harness's clients speak TLS only with HTTP/2; set http2: true")
        return self


class ServerSpec(_ServerSpecBase):
    """Engine and service configuration: every `streamlab serve` option, with its defaults; and
    `proxy`, what the harness puts in front of the server (not a server option)."""
    proxy: ProxySpec | None = Field(None, description="live: a reverse proxy (nginx) between Toxiproxy and the "
                                                      "server")

    @field_validator("model", mode="before")
    @classmethod
    def _bare_null(cls, value):
        if value is None:  # YAML reads a bare `null` as no value at all
            raise ValueError('is YAML\'s null (no value); for the null model preset write model: "null"')
        return value

    def values(self) -> dict:
        return {o.name: getattr(self, o.name) for o in SERVE_OPTIONS}

    def service_config(self) -> ServiceConfig:
        return service_config(self.values())

    def serve_args(self, only_written: bool = False) -> list[str]:
        """`streamlab serve` flags for every option; with only_written, for those the scenario (or
        a comparison's side) wrote, so a server of another git revision keeps its own defaults."""
        if only_written:
            return serve_args({k: v for k, v in self.values().items() if k in self.model_fields_set}, every=False)
        return serve_args(self.values())


# ---- what each client sends ----

class CorpusPrompt(Strict):
    """Prompts drawn (by the scenario seed) from the shipped corpus, cut to a token length range."""
    corpus: Literal[True] = True
    tokens: tuple[int, int] = (16, 64)

    @model_validator(mode="after")
    def _range(self) -> "CorpusPrompt":
        if not 1 <= self.tokens[0] <= self.tokens[1]:
            raise ValueError("tokens must be [min, max] with 1 <= min <= max")
        return self


class LiteralPrompt(Strict):
    text: str = Field(min_length=1)


class RequestSpec(Strict):
    max_new_tokens: int = Field(32, ge=1)
    temperature: float = Field(0.0, ge=0)
    top_k: int = Field(0, ge=0)
    top_p: float = Field(1.0, gt=0, le=1)
    seed: int | None = Field(None, ge=0, description="sampling seed; each stream adds its index")
    stop: list[str] = Field(default_factory=list)
    ignore_eos: bool = True
    pad_bytes: int = Field(0, ge=0, description="lab: a comment of this many bytes before each token event")
    response_class: Literal["starlette", "write_only"] = "starlette"
    ttft_deadline_ms: Annotated[float, Field(gt=0)] | Literal["slo"] | None = Field(
        None, description="the first-token deadline sent with each request (the server's deadline gate, --admission "
                          "deadline): milliseconds, or `slo`: the group's SLO time to first token, as resolved")


# ---- network (Toxiproxy toxics, live; latency and bandwidth are modelled in simulation) ----

class ProxyDown(Strict):
    """Take the group's proxy down at at_s for for_s seconds (live)."""
    at_s: float = Field(ge=0)
    for_s: float = Field(gt=0)


class ToxicWindow(Strict):
    """A toxic added to the group's proxy at at_s and removed for_s later (live). Toxiproxy applies
    a new toxic to connections already open: a reset_peer window cuts running streams mid-way."""
    at_s: float = Field(ge=0)
    for_s: float = Field(gt=0)
    toxic: ToxicSpec


class NetworkSpec(Strict):
    toxics: list[ToxicSpec] = Field(default_factory=list)
    down: list[ProxyDown] = Field(default_factory=list)
    windows: list[ToxicWindow] = Field(default_factory=list, description="toxics for a while, mid-run (live)")
    direct: bool = Field(False, description="bypass the proxy (RST droppers the server must see as RST)")


class Slo(Strict):
    """A request meets its group's SLO when both hold (as in vLLM's benchmark and DistServe).
    `ttft_ms` and `tpot_ms` are one machine's milliseconds; `ttft_x_lone` and `tpot_x_lone` are
    multiples of a lone request's on an idle server, probed in the session (harness/run/capacity.py),
    and hold on any machine."""
    ttft_ms: float | None = Field(None, gt=0, description="time to first token, from the request being sent")
    tpot_ms: float | None = Field(None, gt=0, description="time per output token after the first: "
                                                          "(completion - TTFT) / (tokens - 1)")
    ttft_x_lone: float | None = Field(None, gt=0, description="TTFT within this many times a lone request's")
    tpot_x_lone: float | None = Field(None, gt=0, description="TPOT within this many times a lone request's")

    @model_validator(mode="after")
    def _some(self) -> "Slo":
        if self.ttft_ms is None and self.tpot_ms is None and self.ttft_x_lone is None and self.tpot_x_lone is None:
            raise ValueError("give ttft_ms or ttft_x_lone, tpot_ms or tpot_x_lone, or one of each")
        if self.ttft_ms is not None and self.ttft_x_lone is not None:
            raise ValueError("give ttft_ms or ttft_x_lone, not both")
        if self.tpot_ms is not None and self.tpot_x_lone is not None:
            raise ValueError("give tpot_ms or tpot_x_lone, not both")
        return self

    @property
    def relative(self) -> bool:
        return self.ttft_x_lone is not None or self.tpot_x_lone is not None


class GroupSpec(Strict):
    name: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    # Bounded so a typo cannot ask one harness for a million sockets; past one process, see docs/SCALE.md.
    count: int = Field(1, ge=1, le=20000)
    prompt: CorpusPrompt | LiteralPrompt = Field(default_factory=CorpusPrompt)
    request: RequestSpec = Field(default_factory=RequestSpec)
    behaviour: Behaviour
    arrival: Arrival = Field(default_factory=lambda: AtOnce(kind="at_once"))
    network: NetworkSpec | None = None
    slo: Slo | None = Field(None, description="goodput counts the requests that meet it (refused or unfinished: not)")

    def longest_tokens(self) -> int:
        """The most tokens one of the group's requests can hold: its prompt's longest (a literal
        prompt's characters bound its tokens) and its max_new_tokens, or a trace's mapped bounds."""
        if isinstance(self.arrival, TraceArrival):
            return self.arrival.longest()
        prompt = self.prompt
        longest = prompt.tokens[1] if isinstance(prompt, CorpusPrompt) else len(prompt.text)
        return longest + self.request.max_new_tokens


class EngineErrorFault(Strict):
    """The model raises inside engine step `at_step`, and/or in any step with probability `rate`."""
    at_step: int = Field(0, ge=0, description="0: no fixed step")
    rate: float = Field(0.0, ge=0, le=1)
    seed: int = Field(0, ge=0, description="seed of the rate's draws (a run is repeatable)")

    @model_validator(mode="after")
    def _some(self) -> "EngineErrorFault":
        if not self.at_step and not self.rate:
            raise ValueError("give at_step, rate or both")
        return self


class Faults(Strict):
    engine_error: EngineErrorFault | None = None


class Scenario(Strict):
    name: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    description: str = ""
    seed: int = 0
    modes: list[Literal["sim", "live"]] = Field(default_factory=lambda: ["sim", "live"], min_length=1)
    server: ServerSpec = Field(default_factory=ServerSpec)
    groups: list[GroupSpec] = Field(min_length=1)
    expect: Expectations = Field(default_factory=Expectations)
    drain_s: float = Field(30.0, gt=0, description="how long to wait for the server to drain after the clients")
    max_clients_at_once: int | None = Field(None, ge=1, description="clients past this wait for one to finish")
    run_deadline_s: float | None = Field(None, gt=0, description="clients still running this long after the last "
                                         "planned arrival are stopped, and their streams fail (one that never "
                                         "ends would keep its reader on keep-alives for ever); the swarm writes it "
                                         "into what it finds")
    target: Target | None = Field(None, description="live: the server to aim at (default: this scenario's own "
                                                    "streamlab serve); --target overrides it")
    faults: Faults | None = Field(None, description="lab: faults injected into the server (needs server: {lab: true})")

    def slos(self) -> dict[str, Slo]:
        """The SLO of each group that declares one (on a run's trace: as the run resolved it)."""
        return {g.name: g.slo for g in self.groups if g.slo is not None}

    @model_validator(mode="after")
    def _references(self) -> "Scenario":
        """What involves more than one field, every mistake gathered: a file is told all of them at once."""
        problems: list[FieldProblem] = []
        preset = PRESETS.get(self.server.model)
        if preset is not None and preset.null and "sim" in self.modes:
            problems.append(FieldProblem(("modes",), "the null model runs live only (it has no simulated cost "
                                                     "profile); expected modes: [live]"))
        engine_error = self.faults.engine_error if self.faults else None
        if engine_error is not None:
            if not self.server.lab:
                problems.append(FieldProblem(("faults", "engine_error"), "engine faults need server: {lab: true}"))
            wanted = (engine_error.at_step, engine_error.rate, engine_error.seed)
            given = (self.server.fault_step, self.server.fault_rate, self.server.fault_seed)
            if given not in ((0, 0.0, 0), wanted):  # equal: a scenario dumped after this copy validates again
                problems.append(FieldProblem(("server", "fault_step"),
                                             "give faults in `faults:` or in `server:`, not both"))
            self.server = self.server.model_copy(update={"fault_step": engine_error.at_step,
                                                         "fault_rate": engine_error.rate,
                                                         "fault_seed": engine_error.seed})
        names = [g.name for g in self.groups]
        known = set(names)
        for i, g in enumerate(self.groups):
            if g.name in names[:i]:
                problems.append(FieldProblem(("groups", i, "name"),
                                             f"group name {g.name!r} is used twice; names must be unique"))
        for i, g in enumerate(self.groups):
            if isinstance(g.arrival, JoinWhile) and g.arrival.group not in known - {g.name}:
                problems.append(FieldProblem(("groups", i, "arrival", "group"), f"join_while names unknown group "
                                             f"{g.arrival.group!r}; expected one of {names}"))
        for i, g in enumerate(self.groups):
            if isinstance(g.arrival, TraceArrival):
                try:
                    g.arrival.rows(g.count)
                except TraceFileError as exc:
                    problems.append(FieldProblem(("groups", i, "arrival", "trace"), str(exc)))
        for i, bound in enumerate(self.expect.latency):
            refs = [("group", bound.group)] + ([("baseline_group", bound.baseline_group)]
                                               if not bound.baseline_scenario else [])
            for key, ref in refs:
                if ref is not None and ref not in known:
                    problems.append(FieldProblem(("expect", "latency", i, key),
                                                 f"names unknown group {ref!r}; expected one of {names}"))
        if "sim" in self.modes:
            if self.server.proxy is not None:
                problems.append(FieldProblem(("server", "proxy"), "a proxy can only run live; set modes: [live] "
                                                                 "(simulation has no reverse proxy)"))
            for i, g in enumerate(self.groups):
                net = g.network
                for j, t in enumerate(net.toxics if net else []):
                    if not t.simulated:
                        problems.append(FieldProblem(("groups", i, "network", "toxics", j, "type"),
                                                     f"{t.type} can only run live; set modes: [live] "
                                                     f"(simulation models latency and bandwidth)"))
                if net and net.down:
                    problems.append(FieldProblem(("groups", i, "network", "down"),
                                                 "down can only run live; set modes: [live] "
                                                 "(simulation models latency and bandwidth)"))
                if net and net.windows:
                    problems.append(FieldProblem(("groups", i, "network", "windows"),
                                                 "windows can only run live; set modes: [live] "
                                                 "(simulation models latency and bandwidth)"))
        for i, ref in enumerate(self.expect.outcomes_vary.groups if self.expect.outcomes_vary else []):
            if ref not in known:
                problems.append(FieldProblem(("expect", "outcomes_vary", "groups", i),
                                             f"names unknown group {ref!r}; expected one of {names}"))
        for i, g in enumerate(self.groups):
            if g.request.ttft_deadline_ms == "slo" and (g.slo is None or (g.slo.ttft_ms is None and
                                                                          g.slo.ttft_x_lone is None)):
                problems.append(FieldProblem(("groups", i, "request", "ttft_deadline_ms"),
                                             "`slo` needs the group's slo to give ttft_ms or ttft_x_lone"))
        for ref in self.expect.goodput:
            group = next((g for g in self.groups if g.name == ref), None)
            if group is None or group.slo is None:
                what = "unknown group" if group is None else "a group without an slo"
                problems.append(FieldProblem(("expect", "goodput", ref), f"names {what} {ref!r}; expected one of "
                                             f"{[g.name for g in self.groups if g.slo]}"))
        for ref in self.expect.finish_reasons:
            if ref not in known:
                problems.append(FieldProblem(("expect", "finish_reasons", ref),
                                             f"names unknown group {ref!r}; expected one of {names}"))
        for i, ref in enumerate(self.expect.parity.groups if self.expect.parity else []):
            if ref not in known:
                problems.append(FieldProblem(("expect", "parity", "groups", i),
                                             f"names unknown group {ref!r}; expected one of {names}"))
        problems += self.expect.outcome_problems()
        if problems:
            raise FieldProblems(problems)
        return self
