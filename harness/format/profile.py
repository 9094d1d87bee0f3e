"""Profiles: what a kind of server lets the checks see from outside. No sockets here.

A profile says where a server reports its load (gauges: running, waiting, cache in use; as
Prometheus series, with labels where a series is shared, or llama.cpp's /slots), which counters
make more checks observable (tokens generated: `waste`), its health route, whether its API
returns token ids (and which request fields ask for them), what it answers to each bad request,
and which request fields it needs to generate past an end-of-text token; where a chunk carries
the token ids and the usage; and which counters count requests finished, by how they ended.

The built-in profiles are files (harness/format/profiles/*.yaml), in the same format a scenario's
`target.profile` may take inline: a user whose server renames a metric (a gateway in front of
vLLM, a prefixed metric, a version that changed it) writes the names, or starts from a built-in
one with `extends:` and changes what differs. `streamlab target probe URL` writes such a file
from what a running server shows.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

import yaml
from pydantic import Field, model_validator

from harness.format.strict import Strict

FILES = Path(__file__).resolve().parent / "profiles"

# A series: a metric name, and optionally label matchers, as Prometheus writes them:
# vllm:num_requests_running{model_name="x"}. Samples that match are summed.
SERIES = re.compile(r'^(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)(\{(?P<labels>[^}]*)\})?$')
LABEL = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*"([^"]*)"\s*,?')


def parse_series(spec: str) -> tuple[str, dict[str, str]]:
    """`name` or `name{label="value",...}` as (name, labels); a mistake names what was expected."""
    match = SERIES.match(spec.strip())
    if not match:
        raise ValueError(f"{spec!r} is not a series: expected NAME or NAME{{label=\"value\",...}}")
    labels, text = {}, match.group("labels") or ""
    pos = 0
    while pos < len(text.rstrip()):
        one = LABEL.match(text, pos)
        if not one:
            raise ValueError(f"{spec!r}: labels are label=\"value\" pairs, comma-separated")
        labels[one.group(1)] = one.group(2)
        pos = one.end()
    return match.group("name"), labels


Gauge = Literal["running", "waiting", "cache_in_use"]


class Gauges(Strict):
    """Where a server reports its load: Prometheus series (a name, with label matchers where the
    series is shared; the matching samples summed), or llama.cpp's /slots."""
    source: Literal["prometheus", "llamacpp_slots"] = "prometheus"
    path: str = "/metrics"
    running: str | None = Field(None, description="the series counting requests being generated")
    waiting: str | None = Field(None, description="the series counting requests queued")
    cache_in_use: str | None = Field(None, description="the series of KV cache in use (blocks, tokens or a fraction)")
    idle: dict[Gauge, float] = Field(default_factory=dict,
                                     description="a gauge reads idle at or below this value (default 0): a cache "
                                                 "that keeps prefix blocks after the last request, say")

    @model_validator(mode="after")
    def _check(self) -> "Gauges":
        if self.source == "prometheus":
            for gauge in ("running", "waiting", "cache_in_use"):
                if getattr(self, gauge):
                    parse_series(getattr(self, gauge))
        return self


# How a request ended, in the words of a scenario's finish_reasons (a client that left: client_left).
Finish = Literal["length", "stop", "client_left", "error"]


class Counters(Strict):
    """Prometheus counters that make more checks observable from outside (read before and after a run)."""
    path: str = "/metrics"
    generated_tokens: str | None = Field(None, description="tokens generated, all requests (makes `waste` "
                                                           "observable)")
    finished: dict[Finish, str | list[str]] = Field(
        default_factory=dict, description="requests finished, by how they ended: a series (or several, summed) "
                                          "per reason (makes `finished_once` observable)")

    @model_validator(mode="after")
    def _check(self) -> "Counters":
        if self.generated_tokens:
            parse_series(self.generated_tokens)
        for specs in self.finished_series().values():
            for spec in specs:
                parse_series(spec)
        return self

    def finished_series(self) -> dict[str, list[str]]:
        """Each finish reason's series, a list either way (one series may be written bare)."""
        return {reason: [specs] if isinstance(specs, str) else list(specs) for reason, specs in self.finished.items()}


class Fields(Strict):
    """Where a chunk of the target's OpenAI stream carries what the checks read: `choices[].NAME`
    in each choice, or a dotted path from the chunk's top (a gateway's `meta.token_ids`, say)."""
    token_ids: str = Field("choices[].token_ids", description="a token's ids (read where `token_ids` is true)")
    usage: str | None = Field("usage", description="the usage object (null: the target sends none, and "
                                                   "`usage` is not observable)")

    @model_validator(mode="after")
    def _check(self) -> "Fields":
        for path in (self.token_ids, self.usage):
            if path is not None and not re.fullmatch(r"(choices\[\]\.)?[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*", path):
                raise ValueError(f"{path!r}: expected choices[].NAME or a dotted path like meta.token_ids")
        return self


class Profile(Strict):
    name: str = "inline"
    description: str = ""
    extends: str | None = Field(None, description="a built-in profile this one starts from; every field given "
                                                  "here replaces that one's")
    native_books: bool = False  # streamlab's /stats, /debug/releases, /debug/invariants
    gauges: Gauges | None = None
    counters: Counters | None = None
    health_path: str | None = "/health"
    token_ids: bool = False  # the API returns token ids (with `request_extra`), so identity compares ids
    fields: Fields = Field(default_factory=Fields, description="where token ids and usage are in a chunk")
    ignore_eos: Literal["field", "none"] = "field"  # "field": send ignore_eos; "none": request_extra says it
    request_extra: dict = Field(default_factory=dict, description="fields added to every OpenAI request")
    refusals: dict[str, tuple[int, str | None]] = Field(
        default_factory=dict, description="bad request kind -> (status, error) this target answers on the "
                                          "OpenAI routes, where it differs from what the scenario expects")
    ran_here: bool = False  # run against a real server by this project's tests (the rest only parsed)

    @model_validator(mode="before")
    @classmethod
    def _extend(cls, data):
        """`extends: NAME`: the built-in profile's fields, then this one's over them (gauges and
        counters field by field)."""
        if not isinstance(data, dict) or not data.get("extends"):
            return data
        base_name = data["extends"]
        if base_name not in PROFILES:
            raise ValueError(f"extends: unknown profile {base_name!r}; expected one of {sorted(PROFILES)}")
        merged = PROFILES[base_name].model_dump(exclude={"ran_here"})
        for key, value in data.items():
            if key in ("gauges", "counters", "fields") and isinstance(value, dict) and merged.get(key):
                merged[key] = {**merged[key], **value}
            else:
                merged[key] = value
        if "name" not in data:  # not the built-in's name: the trace says which profile judged
            merged["name"] = f"{base_name} (changed)"
        if "description" not in data:
            merged["description"] = f"{PROFILES[base_name].description}; changed: {', '.join(sorted(set(data) - {'extends'}))}"
        return merged


def load_profile_file(path: Path) -> Profile:
    return Profile.model_validate(yaml.safe_load(path.read_text()))


PROFILES: dict[str, Profile] = {}
for _path in sorted(FILES.glob("*.yaml")):
    _profile = load_profile_file(_path)
    if _profile.name != _path.stem:
        raise ValueError(f"{_path}: name {_profile.name!r}, expected the file's stem {_path.stem!r}")
    PROFILES[_profile.name] = _profile
