"""The server's options, stated once: `streamlab serve` flags, scenario `server:` fields, and
the one mapping from their values to a ServiceConfig.

Each option names its default by reading the config dataclasses, so a default lives in
config.py alone. `streamlab serve` builds its parser from this table; the harness builds its
`ServerSpec` from it and turns a spec into serve flags (live) or straight into a config
(simulation) through the same `service_config()`.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import dataclass, field

from streamlab.defects import DEFECTS
from streamlab.config import CacheConfig, EngineConfig, ResumeConfig, ServiceConfig
from streamlab.policies import BackpressureConfig, Policy

_SERVICE, _ENGINE, _CACHE, _BACKPRESSURE = ServiceConfig(), EngineConfig(), CacheConfig(), BackpressureConfig()
_RESUME = ResumeConfig()


@dataclass(frozen=True)
class ServeOption:
    name: str  # the scenario field and the parsed argument's name
    flag: str
    type: type
    default: object
    help: str
    choices: tuple[str, ...] | None = None
    bounds: dict = field(default_factory=dict)  # pydantic Field bounds for the scenario schema: ge, gt

    @property
    def is_switch(self) -> bool:
        return self.type is bool


SERVE_OPTIONS: tuple[ServeOption, ...] = (
    ServeOption("model", "--model", str, _SERVICE.model,
                "preset (tiny, gpt2-small-random), a local GPT-2 folder, or a GPT-2 name already in the HF cache"),
    ServeOption("policy", "--policy", str, _BACKPRESSURE.policy.value, "who pays for a slow reader",
                choices=tuple(p.value for p in Policy)),
    ServeOption("queue_limit", "--queue-limit", int, _BACKPRESSURE.queue_limit,
                "events queued per stream before the policy acts", bounds={"ge": 1}),
    ServeOption("stall_timeout_s", "--stall-timeout", float, _BACKPRESSURE.stall_timeout_s,
                "seconds at the queue limit before drop/pause_then_drop cancel a stream", bounds={"gt": 0}),
    ServeOption("max_batch", "--max-batch", int, _ENGINE.max_batch, "sequences decoded together", bounds={"ge": 1}),
    ServeOption("max_prefills_per_step", "--max-prefills-per-step", int, _ENGINE.max_prefills_per_step,
                "admissions (prefills) per engine step; 0 = as many as slots and blocks allow", bounds={"ge": 0}),
    ServeOption("step_token_budget", "--step-token-budget", int, _ENGINE.step_token_budget,
                "chunked prefill: tokens per step, every running stream's decode first, then prompt chunks; "
                "0 = off (whole prompts prefilled before the step's decode)", bounds={"ge": 0}),
    ServeOption("prefill_chunk_tokens", "--prefill-chunk", int, _ENGINE.prefill_chunk_tokens,
                "chunked prefill: prompts are cut at multiples of this many tokens", bounds={"ge": 1}),
    ServeOption("prefix_caching", "--prefix-caching", bool, _ENGINE.prefix_caching,
                "prefix caching: full prompt blocks shared by content and kept after their last owner, evicted "
                "least recently used when admission needs room (chunked prefill with whole-block chunks only)"),
    ServeOption("decode_attention", "--decode-attention", str, _ENGINE.decode_attention,
                "decode attention: read K/V through the block table in place (kernel, built at set-up; gather "
                "where it cannot be built) or copy each sequence's blocks out first (gather)",
                choices=("kernel", "gather")),
    ServeOption("dtype", "--dtype", str, _ENGINE.dtype,
                "weights and KV cache: float32 (exact identity with solo runs) or bfloat16",
                choices=("float32", "bfloat16")),
    ServeOption("first_token", "--first-token", str, _SERVICE.first_token,
                "send a stream's first token when its own prefill is done, or when the step ends (whole-prompt "
                "prefill only: with a step token budget it comes with its step's one pass)",
                choices=("prefill", "step")),
    ServeOption("cache_blocks", "--cache-blocks", int, _CACHE.num_blocks, "KV cache blocks in the pool",
                bounds={"ge": 1}),
    ServeOption("block_size", "--block-size", int, _CACHE.block_size, "tokens per cache block", bounds={"ge": 1}),
    ServeOption("waiting_limit", "--waiting-limit", int, _SERVICE.waiting_limit,
                "requests waiting for a slot before 429", bounds={"ge": 1}),
    ServeOption("admission", "--admission", str, _SERVICE.admission,
                "waiting-limit: refuse when --waiting-limit requests wait; deadline: refuse a request whose "
                "first token is predicted past its ttft_deadline_ms (429 deadline_unmeetable), drop one whose "
                "deadline passes while it waits", choices=("waiting-limit", "deadline")),
    ServeOption("ttft_deadline_ms", "--ttft-deadline", float, _SERVICE.ttft_deadline_ms,
                "first-token deadline in ms for requests that name none; 0 = none", bounds={"ge": 0}),
    ServeOption("max_tokens_budget", "--max-tokens-budget", int, _SERVICE.max_tokens_budget,
                "prompt + max_new_tokens per request", bounds={"ge": 2}),
    ServeOption("keepalive_s", "--keepalive", float, _SERVICE.keepalive_s,
                "seconds between keep-alive comments when idle", bounds={"gt": 0}),
    ServeOption("graceful_timeout_s", "--graceful-timeout", float, _SERVICE.graceful_timeout_s,
                "seconds running streams may finish after SIGTERM before they are ended", bounds={"ge": 0}),
    ServeOption("resume_window_s", "--resume-window", float, _RESUME.window_s,
                "seconds a stream waits for its client to reconnect with Last-Event-ID; 0 = off", bounds={"ge": 0}),
    ServeOption("resume_buffer_events", "--resume-buffer-events", int, _RESUME.buffer_events,
                "events already sent that a reconnect can have replayed", bounds={"ge": 1}),
    ServeOption("resume_buffer_bytes", "--resume-buffer-bytes", int, _RESUME.buffer_bytes,
                "payload bytes of those events", bounds={"ge": 1}),
    ServeOption("history", "--history", int, _ENGINE.history,
                "per-request records kept for /debug (ledger entries, release log, ended streams): the most "
                "recent this many", bounds={"ge": 1}),
    ServeOption("lab", "--lab", bool, _SERVICE.lab, "allow pad_bytes and response_class (measurements only)"),
    ServeOption("fault_step", "--fault-step", int, _SERVICE.fault_step,
                "lab: the model raises inside this engine step (0 = never)", bounds={"ge": 0}),
    ServeOption("fault_rate", "--fault-rate", float, _SERVICE.fault_rate,
                "lab: the model raises in any step with this probability", bounds={"ge": 0, "le": 1}),
    ServeOption("fault_seed", "--fault-seed", int, _SERVICE.fault_seed, "lab: seed of --fault-rate's draws"),
    ServeOption("lab_step_slowdown", "--lab-step-slowdown", float, _SERVICE.lab_step_slowdown,
                "lab: every engine step takes this many times its CPU time (busy (F - 1) x its own more)",
                bounds={"ge": 1}),
    ServeOption("lab_defect", "--lab-defect", str, _SERVICE.lab_defect,
                "lab: run with this seeded defect (streamlab/defects.py), to show the swarm finds it; empty: none",
                choices=("",) + tuple(DEFECTS)),
    ServeOption("null_step_ms", "--null-step-ms", float, _SERVICE.null_step_ms,
                "the null model only: each engine step takes at least this many ms (a paced engine); 0 = as "
                "fast as it goes", bounds={"ge": 0}),
    ServeOption("header_timeout_s", "--header-timeout", float, _SERVICE.header_timeout_s,
                "seconds a request head may take to arrive (slowloris); then 408 and the connection closed",
                bounds={"gt": 0}),
    ServeOption("body_timeout_s", "--body-timeout", float, _SERVICE.body_timeout_s,
                "seconds a request body may take after its head; then 408 body_timeout", bounds={"gt": 0}),
    ServeOption("max_connections", "--max-connections", int, _SERVICE.max_connections,
                "open connections before new requests get 503 (uvicorn's limit_concurrency)", bounds={"ge": 1}),
    ServeOption("max_head_bytes", "--max-head-bytes", int, _SERVICE.max_head_bytes,
                "a request head (line and headers) over this many bytes gets 431, the connection closed",
                bounds={"ge": 1024}),
    ServeOption("max_headers", "--max-headers", int, _SERVICE.max_headers,
                "a request with more header fields gets 431", bounds={"ge": 8}),
    ServeOption("api_key", "--api-key", str, _SERVICE.api_key,
                "every /v1/* request must send Authorization: Bearer <key> (default: $STREAMLAB_API_KEY; "
                "empty: no key)"),
    ServeOption("debug", "--debug", bool, _SERVICE.debug, "serve /debug/* and /metrics on the main port"),
    ServeOption("admin_port", "--admin-port", int, _SERVICE.admin_port,
                "serve /debug/*, /metrics, /stats and /healthz on this loopback port too; 0 = none",
                bounds={"ge": 0, "le": 65535}),
)


def add_serve_options(parser: argparse.ArgumentParser) -> None:
    for o in SERVE_OPTIONS:
        if o.is_switch:
            parser.add_argument(o.flag, dest=o.name, action="store_true", help=o.help)
        else:
            parser.add_argument(o.flag, dest=o.name, type=o.type, default=o.default, choices=o.choices, help=o.help)


def service_config(values: Mapping[str, object]) -> ServiceConfig:
    """The one mapping from option values (parsed flags or a scenario's server) to a config."""
    v = {o.name: values.get(o.name, o.default) for o in SERVE_OPTIONS}
    policy = v["policy"].value if isinstance(v["policy"], Policy) else v["policy"]
    return ServiceConfig(
        model=v["model"],
        engine=EngineConfig(max_batch=v["max_batch"], cache=CacheConfig(v["cache_blocks"], v["block_size"]),
                            max_prefills_per_step=v["max_prefills_per_step"],
                            step_token_budget=v["step_token_budget"],
                            prefill_chunk_tokens=v["prefill_chunk_tokens"],
                            decode_attention=v["decode_attention"], dtype=v["dtype"], history=v["history"],
                            prefix_caching=v["prefix_caching"]),
        first_token=v["first_token"],
        backpressure=BackpressureConfig(Policy(policy), v["queue_limit"], v["stall_timeout_s"]),
        waiting_limit=v["waiting_limit"], admission=v["admission"], ttft_deadline_ms=v["ttft_deadline_ms"],
        max_tokens_budget=v["max_tokens_budget"], keepalive_s=v["keepalive_s"],
        graceful_timeout_s=v["graceful_timeout_s"], lab=v["lab"], fault_step=v["fault_step"],
        fault_rate=v["fault_rate"], fault_seed=v["fault_seed"], lab_step_slowdown=v["lab_step_slowdown"], lab_defect=v["lab_defect"],
        null_step_ms=v["null_step_ms"],
        header_timeout_s=v["header_timeout_s"],
        body_timeout_s=v["body_timeout_s"], max_connections=v["max_connections"],
        max_head_bytes=v["max_head_bytes"], max_headers=v["max_headers"], api_key=v["api_key"],
        debug=v["debug"],
        admin_port=v["admin_port"],
        resume=ResumeConfig(v["resume_window_s"], v["resume_buffer_events"], v["resume_buffer_bytes"]))


def serve_args(values: Mapping[str, object], every: bool = True) -> list[str]:
    """Option values as `streamlab serve` flags: every option, so no default is assumed twice; or,
    with every=False, only those in `values` (a server of another revision keeps its own defaults)."""
    args: list[str] = []
    for o in SERVE_OPTIONS:
        if not every and o.name not in values:
            continue
        value = values.get(o.name, o.default)
        value = value.value if isinstance(value, Policy) else value
        if o.is_switch:
            args += [o.flag] if value else []
        else:
            args += [o.flag, str(value)]
    return args
