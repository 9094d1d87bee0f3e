"""Targets: the server a live run aims at, and what can be observed on it. No sockets here.

    Target     where the server is (our own `streamlab serve`, a command we start, or a URL
               already serving on loopback), which API the clients speak, which model they name
    Profile    what a kind of server lets us see from outside (harness.format.profile): a
               built-in one by name, or written inline

Every check on a target is evaluated or reported "not observable"; a profile decides which.
`streamlab` is the reference profile: its own books (/stats, /debug/releases) make every
check observable. The others were written from each project's documented metrics; which of
them were run against a real server is in docs/TARGETS.md.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from pydantic import Field, model_validator

from harness.machine import reach
from harness.format.profile import PROFILES, Profile, load_profile_file
from harness.format.strict import Strict
from streamlab.presets import PRESETS

# VLLM_TARGET_DEVICE=cpu: with the `vllm` dist-info scripts/dev writes (version 0.32.0+cpu) it
# loads the AVX2 kernels. VLLM_CPU_KVCACHE_SPACE: GiB of KV cache (its default takes 4).
VLLM_SERVER_ENV = {"VLLM_TARGET_DEVICE": "cpu", "VLLM_CPU_KVCACHE_SPACE": "1",
                   # its OpenMP threads, one per core listed: as many as ours (harness.machine.cores)
                   "VLLM_CPU_OMP_THREADS_BIND": "{cores}"}
# vLLM's CPU attention supports head sizes 32, 64, 80 and up: `tiny` (16) cannot run there.
VLLM_MIN_HEAD = 32

Api = Literal["streamlab", "openai-completions", "openai-chat"]


class Target(Strict):
    """A scenario's `target:` block, or `--target`. Without url or command: the scenario's own server."""
    name: str = "streamlab"
    profile: str | Profile = Field("streamlab", description="what the checks can see on this server: a built-in "
                                                            "profile's name, or one written here (harness/format/"
                                                            "profile.py; `extends: NAME` starts from a built-in one)")
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
                                                        "GGUF file), {threads} and {cores} (the compute threads "
                                                        "our own server gets, and that many cores, 0-N) are "
                                                        "filled in")
    serves: str | None = Field(None, description="a command's server is given this preset in place of the "
                                                 "scenario's model (one it cannot load); the prompts are the same, "
                                                 "since every preset shares the tokenizer")
    env: dict[str, str] = Field(default_factory=dict, description="a command's environment, beside ours; its "
                                                                "values are filled in as the command is")
    model: str | None = Field(None, description="the model name requests carry; default: the served one")
    health_path: str | None = Field(None, description="default: the profile's")
    start_deadline_s: float = Field(180.0, gt=0)
    probe_clients: int | None = Field(None, ge=1, description="capacity probe size; default: the scenario's "
                                                              "max_batch")
    api_key: str = Field(default_factory=lambda: os.environ.get("STREAMLAB_TARGET_API_KEY", ""), repr=False,
                         description="sent as Authorization: Bearer <key> (default: $STREAMLAB_TARGET_API_KEY)")

    @model_validator(mode="after")
    def _check(self) -> "Target":
        if isinstance(self.profile, str) and self.profile not in PROFILES:
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
        return self.profile if isinstance(self.profile, Profile) else PROFILES[self.profile]

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
    # Its paged cache given a quarter of free memory, as vLLM's is given 1 GiB: by default it takes most
    # of it (14.8 GB resident here) and fills an attention mask over the whole cache at start, 28 s of
    # a 1-thread start; a quarter (6.6 GB, still far more tokens than the library holds at once) 11 s.
    Target(name="transformers-serve", profile="transformers-serve", api="openai-completions",
           command=["{transformers}", "serve", "{model_dir}", "--continuous-batching", "--cb-max-memory-percent",
                    "0.25", "--device", "cpu", "--dtype", "float32", "--host", "127.0.0.1", "--port", "{port}",
                    "--log-level", "warning"]),
    # One slot per sequence the scenario's own server would batch, each with the model's whole
    # context ({context}: -c is shared by the slots); as many threads as our server's ({threads}).
    Target(name="llamacpp", profile="llamacpp", api="openai-completions",
           command=["{llama_server}", "-m", "{model_gguf}", "--host", "127.0.0.1", "--port", "{port}", "--metrics",
                    "-np", "{max_batch}", "-c", "{context}", "--no-webui", "-t", "{threads}"]),
    # vLLM's CPU backend (harness/targets/engines.py): its attention needs a head size of 32 or more and
    # tiny's is 16, so it serves stdlib-small (head 32, 256 positions); eager (no graph capture:
    # 40 s to start, not minutes) and float32, so its greedy tokens can equal ours.
    Target(name="vllm", profile="vllm", api="openai-completions", serves="stdlib-small", start_deadline_s=300,
           command=["{vllm}", "serve", "{model_dir}", "--host", "127.0.0.1", "--port", "{port}", "--enforce-eager",
                    "--dtype", "float32", "--max-model-len", "{positions}", "--max-num-seqs", "{max_batch}"],
           env=VLLM_SERVER_ENV),
]}


def profile_named(spec: str | None) -> str | Profile | None:
    """`--target-profile`: a built-in profile's name, or a profile file (what `streamlab target probe` writes)."""
    if spec and spec not in PROFILES and (spec.endswith((".yaml", ".yml")) or os.path.sep in spec):
        try:
            return load_profile_file(Path(spec))
        except OSError as exc:
            raise ValueError(f"--target-profile: cannot read {spec}: {exc}") from None
    return spec


def resolve_target(spec: str | None, api: str | None = None, model: str | None = None,
                   profile: str | None = None, ca_file: str | None = None, insecure: bool = False) -> Target:
    """`--target NAME|URL` (with optional --target-api/-model/-profile, and --ca-file or --insecure
    for https) as a Target."""
    if spec is None or spec in TARGETS:
        base = TARGETS[spec or "streamlab"]
        profile = profile_named(profile)
        changes = {k: v for k, v in (("api", api), ("model", model), ("profile", profile)) if v}
        return Target.model_validate({**base.model_dump(), **changes}) if changes else base
    if "://" in spec:
        profile = profile_named(profile)
        return Target(name=spec, url=spec, api=api or "openai-completions", model=model,
                      profile=profile or "generic", ca_file=ca_file, insecure=insecure)
    if ca_file or insecure:
        raise ValueError("--ca-file and --insecure are for an https URL target")
    raise ValueError(f"unknown target {spec!r}; expected a URL or one of {sorted(TARGETS)}")
