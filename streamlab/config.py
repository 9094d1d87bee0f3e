"""Configuration as frozen dataclasses, checked when built. Reads no environment or argv."""

from __future__ import annotations

from dataclasses import dataclass, field

from streamlab.defects import DEFECTS
from streamlab.policies import BackpressureConfig


def _require(condition: bool, message: str) -> None:
    # Not `assert`: input checks must survive `python -O`.
    if not condition:
        raise ValueError(message)


@dataclass(frozen=True)
class CacheConfig:
    num_blocks: int = 1024
    block_size: int = 16

    def __post_init__(self) -> None:
        _require(self.num_blocks >= 1, f"num_blocks must be >= 1, got {self.num_blocks}")
        _require(self.block_size >= 1, f"block_size must be >= 1, got {self.block_size}")

    def blocks_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)


@dataclass(frozen=True)
class EngineConfig:
    max_batch: int = 32
    cache: CacheConfig = CacheConfig()
    # Admissions (each one prefill) per step; 0 = as many as slots and blocks allow. A cap lets
    # the running streams' decode go on between groups of prefills when many arrive at once.
    max_prefills_per_step: int = 0
    # Prompt tokens packed into one prefill pass (at least one prompt per pass). Bigger passes
    # use the CPU better; each pass's first tokens can go out as soon as it ends.
    prefill_pass_tokens: int = 512
    # Chunked prefill beside decode: a step runs every running stream's decode token, then as
    # many prompt chunks as fit in this many tokens, in one pass (0: off, whole prompts
    # prefilled in passes of their own before the decode, as above).
    step_token_budget: int = 128
    # A prompt is cut at fixed multiples of this many tokens, whatever else is in the step, so
    # its cache and first token do not depend on its neighbours.
    prefill_chunk_tokens: int = 32
    # Decode attention: "gather" copies each sequence's blocks out of the pool and runs
    # scaled_dot_product_attention; "kernel" reads them through the block table in place
    # (streamlab/engine/paged_kernel.py, built at set-up; "gather" where it cannot be built).
    decode_attention: str = "kernel"
    # The weights' and the cache's dtype: float32 (exact, the default) or bfloat16 (identity
    # with solo runs is then measured, not promised: see the results page).
    dtype: str = "float32"
    # Per-request records kept for inspection (the ledger's released entries, the hub's release
    # log, remembered ended streams): the most recent this many. Aggregates are kept forever.
    history: int = 10_000
    # Prefix caching: full prompt blocks keyed by content and position, shared by reference count
    # and kept after their last owner leaves, until admission needs the room (streamlab/engine/
    # prefix_cache.py). Only with chunked prefill and chunks of whole blocks: a sequence then
    # starts computing at a chunk boundary, so its bits are those of a run without the cache.
    prefix_caching: bool = False

    def __post_init__(self) -> None:
        _require(self.history >= 1, f"history must be >= 1, got {self.history}")
        _require(not self.prefix_caching or (self.step_token_budget > 0
                                             and self.prefill_chunk_tokens % self.cache.block_size == 0),
                 "prefix_caching needs chunked prefill (step_token_budget > 0) with prefill_chunk_tokens a "
                 f"multiple of the block size ({self.cache.block_size}), got step_token_budget "
                 f"{self.step_token_budget} and prefill_chunk_tokens {self.prefill_chunk_tokens}")
        _require(self.dtype in ("float32", "bfloat16"), f"dtype must be 'float32' or 'bfloat16', got {self.dtype!r}")
        _require(self.decode_attention in ("gather", "kernel"),
                 f"decode_attention must be 'gather' or 'kernel', got {self.decode_attention!r}")
        _require(self.step_token_budget >= 0, f"step_token_budget must be >= 0, got {self.step_token_budget}")
        _require(self.prefill_chunk_tokens >= 1,
                 f"prefill_chunk_tokens must be >= 1, got {self.prefill_chunk_tokens}")
        _require(self.max_batch >= 1, f"max_batch must be >= 1, got {self.max_batch}")
        _require(self.prefill_pass_tokens >= 1, f"prefill_pass_tokens must be >= 1, got {self.prefill_pass_tokens}")
        _require(self.max_prefills_per_step >= 0,
                 f"max_prefills_per_step must be >= 0, got {self.max_prefills_per_step}")


@dataclass(frozen=True)
class ResumeConfig:
    """Last-Event-ID resumption: what a stream keeps after its client leaves, and for how long."""
    window_s: float = 0.0  # 0: off (a disconnect releases at once, as without resumption)
    buffer_events: int = 256  # events already written that a reconnect can have replayed
    buffer_bytes: int = 64 * 1024  # ... and their JSON payload bytes
    retry_ms: int = 1000  # the SSE `retry:` a browser waits before reconnecting

    def __post_init__(self) -> None:
        _require(self.window_s >= 0, f"resume window must be >= 0 s, got {self.window_s}")
        _require(self.buffer_events >= 1, f"resume buffer must hold >= 1 event, got {self.buffer_events}")
        _require(self.buffer_bytes >= 1, f"resume buffer must hold >= 1 byte, got {self.buffer_bytes}")
        _require(self.retry_ms >= 0, f"retry must be >= 0 ms, got {self.retry_ms}")

    @property
    def on(self) -> bool:
        return self.window_s > 0


@dataclass(frozen=True)
class ServiceConfig:
    model: str = "tiny"
    engine: EngineConfig = EngineConfig()
    backpressure: BackpressureConfig = field(default_factory=BackpressureConfig)
    waiting_limit: int = 64  # requests queued for a slot before new ones get 429
    max_tokens_budget: int = 1024  # prompt tokens + max_new_tokens, per request
    keepalive_s: float = 15.0
    graceful_timeout_s: float = 5.0
    lab: bool = False  # padding, the write-only response and fault injection, for measurements only
    # Lab only: the model raises inside step `fault_step` (0: never) and/or in any step with
    # probability `fault_rate`, from a generator seeded with `fault_seed` (streamlab.engine FaultPlan).
    fault_step: int = 0
    fault_rate: float = 0.0
    fault_seed: int = 0
    # Lab only: every engine step also works (lab_step_slowdown - 1) x its own CPU time more, a
    # slower engine on demand (the timing gates must catch it on any machine).
    lab_step_slowdown: float = 1.0
    # Lab only: a seeded defect switched on (streamlab/defects.py), for the swarm's proof; "": none.
    lab_defect: str = ""
    # The `null` model only (streamlab/null_model.py): each forward pass takes at least this long.
    null_step_ms: float = 0.0
    # "prefill": a stream's first token goes out as soon as its own prefill is done;
    # "step": with the rest of the step's events, when the whole step ends (the chapter's lab).
    first_token: str = "prefill"
    resume: ResumeConfig = ResumeConfig()
    # "waiting-limit": refuse when waiting_limit requests wait; "deadline": a request with a
    # first-token deadline is refused when it is predicted to miss it (streamlab/deadline.py).
    admission: str = "waiting-limit"
    ttft_deadline_ms: float = 0.0  # the deadline of a request that names none; 0: none
    # Exposure: a key every /v1/* request must send as `Authorization: Bearer <key>` ("": none);
    # /debug/* and /metrics only with `debug`, or on a separate admin port (0: none).
    api_key: str = field(default="", repr=False)
    debug: bool = False
    admin_port: int = 0
    max_body_bytes: int = 64 * 1024
    # Hostile clients: the request head must arrive within header_timeout_s (streamlab/guard.py:
    # uvicorn has no such timeout), and the body within body_timeout_s of the head.
    header_timeout_s: float = 10.0
    body_timeout_s: float = 10.0
    max_connections: int = 4096  # open connections before uvicorn answers new requests 503
    max_head_bytes: int = 16 * 1024  # a request head (line and headers) larger gets 431, connection closed
    max_headers: int = 100  # header fields in one request; more get 431
    max_pad_bytes: int = 1024 * 1024

    def __post_init__(self) -> None:
        _require(self.waiting_limit >= 1, f"waiting_limit must be >= 1, got {self.waiting_limit}")
        _require(self.max_tokens_budget >= 2, f"max_tokens_budget must be >= 2, got {self.max_tokens_budget}")
        _require(self.keepalive_s > 0, f"keepalive must be > 0 s, got {self.keepalive_s}")
        _require(self.first_token in ("prefill", "step"),
                 f"first_token must be 'prefill' or 'step', got {self.first_token!r}")
        _require(self.admission in ("waiting-limit", "deadline"),
                 f"admission must be 'waiting-limit' or 'deadline', got {self.admission!r}")
        _require(self.ttft_deadline_ms >= 0, f"ttft deadline must be >= 0 ms, got {self.ttft_deadline_ms}")
        _require(self.fault_step >= 0 and 0 <= self.fault_rate <= 1,
                 f"fault_step must be >= 0 and fault_rate in [0, 1], got {self.fault_step}, {self.fault_rate}")
        _require(self.lab or not (self.fault_step or self.fault_rate), "engine faults need --lab")
        _require(self.lab_step_slowdown >= 1, f"lab step slowdown must be >= 1, got {self.lab_step_slowdown}")
        _require(self.lab or self.lab_step_slowdown == 1, "a step slowdown needs --lab")
        _require(self.lab or not self.lab_defect, "a seeded defect needs --lab")
        _require(not self.lab_defect or self.lab_defect in DEFECTS,
                 f"unknown lab defect {self.lab_defect!r}; expected one of {sorted(DEFECTS)}")
        _require(self.header_timeout_s > 0 and self.body_timeout_s > 0, "header and body timeouts must be > 0 s")
        _require(self.max_head_bytes >= 1024 and self.max_headers >= 8, "max_head_bytes >= 1024, max_headers >= 8")
        _require(self.max_connections >= 1, f"max_connections must be >= 1, got {self.max_connections}")
        _require(0 <= self.admin_port <= 65535, f"admin port must be 0-65535, got {self.admin_port}")
        _require(self.graceful_timeout_s >= 0, f"graceful timeout must be >= 0 s, got {self.graceful_timeout_s}")
