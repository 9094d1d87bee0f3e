"""Targets: the server a live run aims at, and what can be observed on it. No sockets here.

    Target     where the server is (our own `streamlab serve`, a command we start, or a URL
               already serving on loopback), which API the clients speak, which model they name
    Profile    what a kind of server lets us see from outside: its gauges for "running",
               "waiting" and "cache in use" (Prometheus text or llama.cpp's /slots), whether its
               API returns token ids, what it answers to each bad request, and which request
               fields it needs to generate past an end-of-text token

Every check on a target is evaluated or reported "not observable"; a profile decides which.
`streamlab` is the reference profile: its own books (/stats, /debug/releases) make every
check observable. The others were written from each project's documented metrics; which of
them were run against a real server is in docs/TARGETS.md.
"""

from __future__ import annotations

import json
import os
from typing import Literal
from urllib.parse import urlsplit

from pydantic import Field, model_validator

from harness.machine import reach
from harness.format.strict import Strict
from streamlab.presets import PRESETS

# VLLM_TARGET_DEVICE=cpu: with the `vllm` dist-info scripts/dev writes (version 0.32.0+cpu) it
# loads the AVX2 kernels. VLLM_CPU_KVCACHE_SPACE: GiB of KV cache (its default takes 4).
VLLM_SERVER_ENV = {"VLLM_TARGET_DEVICE": "cpu", "VLLM_CPU_KVCACHE_SPACE": "1"}
# vLLM's CPU attention supports head sizes 32, 64, 80 and up: `tiny` (16) cannot run there.
VLLM_MIN_HEAD = 32

Api = Literal["streamlab", "openai-completions", "openai-chat"]


Gauge = Literal["running", "waiting", "cache_in_use"]


class Gauges(Strict):
    """Where a server reports its load: series names (summed over label sets) or llama.cpp's /slots."""
    source: Literal["prometheus", "llamacpp_slots"] = "prometheus"
    path: str = "/metrics"
    running: str | None = None
    waiting: str | None = None
    cache_in_use: str | None = None


class Profile(Strict):
    name: str
    description: str
    native_books: bool = False  # streamlab's /stats, /debug/releases, /debug/invariants
    gauges: Gauges | None = None
    health_path: str | None = "/health"
    token_ids: bool = False  # the API returns token ids (with `request_extra`), so identity compares ids
    ignore_eos: Literal["field", "none"] = "field"  # "field": send ignore_eos; "none": request_extra says it
    request_extra: dict = Field(default_factory=dict, description="fields added to every OpenAI request")
    refusals: dict[str, tuple[int, str | None]] = Field(
        default_factory=dict, description="bad request kind -> (status, error) this target answers on the "
                                          "OpenAI routes, where it differs from what the scenario expects")
    ran_here: bool = False  # run against a real server by this project's tests (the rest only parsed)


PROFILES: dict[str, Profile] = {p.name: p for p in [
    Profile(name="streamlab", description="our own server: every check observable from its books",
            native_books=True, health_path="/healthz", token_ids=True, ran_here=True,
            gauges=Gauges(running="streamlab_running", waiting="streamlab_waiting",
                          cache_in_use="streamlab_blocks_reserved"),
            request_extra={"return_token_ids": True},
            # `pad_bytes` is a lab field of /v1/stream only: the OpenAI routes refuse it as unknown.
            refusals={"lab_option": (422, "invalid_request")}),
    Profile(name="transformers-serve", ran_here=True,
            description="`transformers serve --continuous-batching`: no load gauges, text only",
            ignore_eos="none", request_extra={"generation_config": json.dumps({"eos_token_id": -1})},
            # FastAPI's own refusals: 422 with {"detail": [...]} where we answer 400/415/403. A
            # convention, so mapped; its 500s and crashes are not mapped (see docs/TARGETS.md).
            refusals={"malformed_json": (422, "detail"), "unknown_field": (422, "detail"),
                      "wrong_content_type": (422, "detail"), "lab_option": (422, "detail")}),
    Profile(name="vllm", description="vLLM's OpenAI server: /metrics gauges; token ids with return_token_ids",
            token_ids=True, request_extra={"return_token_ids": True}, ran_here=True,
            gauges=Gauges(running="vllm:num_requests_running", waiting="vllm:num_requests_waiting",
                          cache_in_use="vllm:kv_cache_usage_perc"),
            # Its own refusals (0.32.0's CPU backend, measured here): 400 for all of them, typed
            # "Bad Request" where the body is not a request and "BadRequestError" where the request
            # cannot be served. A convention, so mapped; what it serves instead is a finding.
            refusals={"malformed_json": (400, "Bad Request"), "wrong_type": (400, "Bad Request"),
                      "wrong_content_type": (400, "Bad Request"), "too_many_tokens": (400, "BadRequestError"),
                      "body_too_large": (400, "BadRequestError"), "empty_prompt": (400, "BadRequestError")}),
    Profile(name="tgi", description="text-generation-inference: queue and batch gauges, no cache gauge",
            ignore_eos="none",
            gauges=Gauges(running="tgi_batch_current_size", waiting="tgi_queue_size")),
    Profile(name="sglang", description="SGLang (--enable-metrics): running, queue and token usage gauges",
            gauges=Gauges(running="sglang:num_running_reqs", waiting="sglang:num_queue_reqs",
                          cache_in_use="sglang:token_usage")),
    # llama.cpp b11434 (scraped here): no KV-cache gauge; `kv_cache_tokens` was removed upstream
    # (llama.cpp PRs 13660 and 22879), so the cache in use is not observable there.
    Profile(name="llamacpp", description="llama.cpp's llama-server (--metrics): processing and deferred",
            ran_here=True,
            gauges=Gauges(running="llamacpp:requests_processing", waiting="llamacpp:requests_deferred"),
            # Its own refusals (b11434, measured here): 400 for what we answer 422, and a body too
            # large for the context refused as such. A convention, so mapped; what it serves
            # instead of refusing is a finding (FINDINGS).
            refusals={"malformed_json": (400, "invalid_request_error"), "wrong_type": (400, "invalid_request_error"),
                      "body_too_large": (400, "exceed_context_size_error")}),
    Profile(name="llamacpp-slots", description="llama.cpp's llama-server /slots: slots processing",
            gauges=Gauges(source="llamacpp_slots", path="/slots", running="is_processing")),
    Profile(name="generic", description="any OpenAI-compatible server: only what a client sees",
            health_path=None),
]}


class Target(Strict):
    """A scenario's `target:` block, or `--target`. Without url or command: the scenario's own server."""
    name: str = "streamlab"
    profile: str = "streamlab"
    api: Api = "streamlab"
    url: str | None = Field(None, description="a server already running: http or https, on this machine's loopback "
                                              "(http://127.0.0.1:8000) or, with its owner's consent (--allow-remote "
                                              "HOST or STREAMLAB_ALLOW_REMOTE), on another host")
    ca_file: str | None = Field(None, description="an https url's certificate is verified against these CAs "
                                                  "(default: the system's)")
    insecure: bool = Field(False, description="an https url's certificate is not verified (a self-signed staging "
                                              "server): say so explicitly")
    command: list[str] | None = Field(None, description="starts the server; {port}, {model}, {max_batch}, "
                                                        "{positions} (the model's), {context} (max_batch x the "
                                                        "model's positions), {model_dir} and {model_gguf} (the "
                                                        "scenario's model exported as a transformers folder or a "
                                                        "GGUF file) are filled in")
    serves: str | None = Field(None, description="a command's server is given this preset in place of the "
                                                 "scenario's model (one it cannot load); the prompts are the same, "
                                                 "since every preset shares the tokenizer")
    env: dict[str, str] = Field(default_factory=dict, description="a command's environment, beside ours")
    model: str | None = Field(None, description="the model name requests carry; default: the served one")
    health_path: str | None = Field(None, description="default: the profile's")
    start_deadline_s: float = Field(180.0, gt=0)
    probe_clients: int | None = Field(None, ge=1, description="capacity probe size; default: the scenario's "
                                                              "max_batch")
    api_key: str = Field(default_factory=lambda: os.environ.get("STREAMLAB_TARGET_API_KEY", ""), repr=False,
                         description="sent as Authorization: Bearer <key> (default: $STREAMLAB_TARGET_API_KEY)")

    @model_validator(mode="after")
    def _check(self) -> "Target":
        if self.profile not in PROFILES:
            raise ValueError(f"profile: unknown profile {self.profile!r}; expected one of {sorted(PROFILES)}")
        if self.url is not None and self.command is not None:
            raise ValueError("give url or command, not both")
        if self.url is not None:
            parts = urlsplit(self.url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ValueError(f"url: expected http://HOST:PORT or https://HOST:PORT, got {self.url!r}")
            refused = reach.refusal(parts.hostname)
            if refused:
                raise ValueError(f"url: {refused}")
        if (self.ca_file or self.insecure) and not (self.url or "").startswith("https://"):
            raise ValueError("ca_file and insecure are for an https url")
        if self.ca_file and self.insecure:
            raise ValueError("give ca_file (verify against it) or insecure (verify nothing), not both")
        if self.serves is not None and self.command is None:
            raise ValueError("serves: only a server we start from its command can be given another model")
        if self.serves is not None and self.serves not in PRESETS:
            raise ValueError(f"serves: unknown preset {self.serves!r}; expected one of {sorted(PRESETS)}")
        if self.own_server and self.profile != "streamlab":
            raise ValueError("a target without url or command is our own streamlab serve: profile streamlab")
        return self

    def uses(self, placeholder: str) -> bool:
        """The command names {placeholder}: the endpoint fills it (harness.live.backend)."""
        return any("{" + placeholder + "}" in part for part in self.command or [])

    @property
    def own_server(self) -> bool:
        return self.url is None and self.command is None

    @property
    def origin(self) -> reach.Origin | None:
        """A url target's host, port and TLS (verified unless insecure was asked for)."""
        if self.url is None:
            return None
        parts = urlsplit(self.url)
        https = parts.scheme == "https"
        ca_file = self.ca_file or os.environ.get("STREAMLAB_TARGET_CA_FILE") or None
        return reach.Origin(parts.hostname, parts.port or (443 if https else 80),
                            reach.tls_context(ca_file, self.insecure) if https else None)

    @property
    def profile_spec(self) -> Profile:
        return PROFILES[self.profile]

    @property
    def health(self) -> str | None:
        return self.health_path or self.profile_spec.health_path

    @property
    def default(self) -> bool:
        """The scenario's own server on our own route: the mode every scenario already runs in."""
        return self.own_server and self.api == "streamlab"


TARGETS: dict[str, Target] = {t.name: t for t in [
    Target(),
    Target(name="streamlab-openai", api="openai-completions"),
    Target(name="streamlab-chat", api="openai-chat"),
    Target(name="transformers-serve", profile="transformers-serve", api="openai-completions",
           command=["{transformers}", "serve", "{model_dir}", "--continuous-batching", "--device", "cpu",
                    "--dtype", "float32", "--host", "127.0.0.1", "--port", "{port}", "--log-level", "warning"]),
    # One slot per sequence the scenario's own server would batch, each with the model's whole
    # context ({context}: -c is shared by the slots).
    Target(name="llamacpp", profile="llamacpp", api="openai-completions",
           command=["{llama_server}", "-m", "{model_gguf}", "--host", "127.0.0.1", "--port", "{port}", "--metrics",
                    "-np", "{max_batch}", "-c", "{context}", "--no-webui"]),
    # vLLM's CPU backend (harness/targets/engines.py): its attention needs a head size of 32 or more and
    # tiny's is 16, so it serves stdlib-small (head 32, 256 positions); eager (no graph capture:
    # 40 s to start, not minutes) and float32, so its greedy tokens can equal ours.
    Target(name="vllm", profile="vllm", api="openai-completions", serves="stdlib-small", start_deadline_s=300,
           command=["{vllm}", "serve", "{model_dir}", "--host", "127.0.0.1", "--port", "{port}", "--enforce-eager",
                    "--dtype", "float32", "--max-model-len", "{positions}", "--max-num-seqs", "{max_batch}"],
           env=VLLM_SERVER_ENV),
]}


def resolve_target(spec: str | None, api: str | None = None, model: str | None = None,
                   profile: str | None = None, ca_file: str | None = None, insecure: bool = False) -> Target:
    """`--target NAME|URL` (with optional --target-api/-model/-profile, and --ca-file or --insecure
    for https) as a Target."""
    if spec is None or spec in TARGETS:
        base = TARGETS[spec or "streamlab"]
        changes = {k: v for k, v in (("api", api), ("model", model), ("profile", profile)) if v}
        return Target.model_validate({**base.model_dump(), **changes}) if changes else base
    if "://" in spec:
        return Target(name=spec, url=spec, api=api or "openai-completions", model=model,
                      profile=profile or "generic", ca_file=ca_file, insecure=insecure)
    if ca_file or insecure:
        raise ValueError("--ca-file and --insecure are for an https URL target")
    raise ValueError(f"unknown target {spec!r}; expected a URL or one of {sorted(TARGETS)}")
