"""The cost model the simulation advances time by, and the calibration that measures it.

Engine terms (fitted on the engine alone, in-process, with the torch threads a live server
gets, see harness/machine/cores.py): a step costs decode(batch), interpolated between
measured batch sizes, + decode_per_context_token x (context its decodes attend to beyond the
reference) + prefill_fixed x (prompts prefilled) + prefill_per_token x (prompt tokens). Serving terms (fitted from live runs of `streamlab serve` by `streamlab scenario
calibrate`, see harness/fit/calibrate.py): a step that hands over n events takes serving(n) more,
the server's one core spends per_request seconds on each request, and a lone request waits
request_latency more.
Each term's meaning is written into the profile file beside its value.
"""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path

from typing import TYPE_CHECKING

from harness.machine.cores import server_threads, torch_threads

if TYPE_CHECKING:  # torch: a profile is read and judged with no engine of ours installed (target mode)
    from streamlab.engine.outputs import StepOutput

PROFILES = Path(__file__).resolve().parents[2] / "scenarios" / "profiles"
DEFAULT_SEND_BUFFER_BYTES = 262_144  # bytes a non-reading client absorbs before writes block (`lab buffers`)

TERMS = {
    "decode_s": "engine alone: [batch, seconds] of a decode step at measured batch sizes; a step of another "
                "size is interpolated linearly (extrapolated past the last). A line through them overstated "
                "batch 1 by 40%",
    "decode_per_context_token_s": "engine alone: seconds a decode step takes more per token of context its "
                                  "sequences attend to beyond decode_context_ref each (a long stream's step "
                                  "grows: batch 8 went 0.85 -> 1.1 ms over 300 tokens, live)",
    "decode_context_ref": "engine alone: the context per sequence decode_s was measured at",
    "prefill_fixed_s": "engine alone: seconds per prompt prefilled",
    "prefill_per_token_s": "engine alone: seconds per prompt token prefilled",
    "idle_step_s": "a step that only applied wishes",
    "serving_s": "serving, live: [events a step hands over, seconds]: what a step takes in the live server beyond "
                 "the engine alone (SSE encoding and writes, wake-ups, and the step thread waiting for the GIL "
                 "while the event loop writes the last step's events): the mean live period of decode steps (under 50 ms) "
                 "of each calibrated batch size minus the engine's in-process cost for that step, interpolated "
                 "between them. Not a line: one event a step costs about nothing (the loop writes it while the "
                 "step runs in torch, without the GIL), eight cost ~1 ms. May be below zero where the "
                 "in-process step measured slower than the server's",
    "serving_per_byte_s": "serving, live: seconds of the server's one core per byte written to a client (the "
                          "write and its SSE framing), charged when the server writes, queued with the steps and "
                          "the requests' work. Chosen so that cal_unread's readers, beside streams whose 128 KiB "
                          "events are written but not read until the readers are done, complete in simulation "
                          "when they did live; the steps' periods do not show it: the steps run on and the bytes "
                          "queue behind them. A profile without client_per_byte_s has both costs here",
    "client_per_byte_s": "serving, live: seconds per byte a client's read costs the same cores (its copy and "
                         "parse; Toxiproxy's copy where there is one), charged when the client reads: the server's "
                         "queue waits for it, the read does not wait for the server's queue. Chosen, "
                         "with serving_per_byte_s fixed, so that cal_padded, whose 64 KiB events are read at "
                         "once, completes in simulation when it did live. Apart from the write's cost because a "
                         "slow reader reads long after the server wrote: under a 0.5 CPU quota (one core for "
                         "server and clients) both charged at the write read 22 ms per MB and put the healthy "
                         "readers beside slow readers at 0.66-0.68x of the simulation",
    "per_request_s": "serving, live: the server's core time per request (HTTP, JSON, tokenizing, the head), "
                     "queued on one core so a burst is handled one request after another; chosen so that the "
                     "calibration's bursts' simulated head spans (first send to last response head) match the live "
                     "ones, since the steps that run inside a burst are charged by the simulation itself. Every "
                     "scenario request has its own connection, so a per-connection cost cannot be told apart "
                     "and is part of it",
    "request_latency_s": "serving, live: what a lone request waits beyond that core time (connect, wake-ups "
                         "of the step thread and the event loop, the client's read): the median of a lone "
                         "request's live TTFT minus its simulated TTFT without this term",
    "refused_request_s": "serving, live: the server's core time per request it refuses while reading it (a "
                         "bad body, type, size or key: no tokenizing, no stream, a small JSON error), queued on "
                         "the same core as per_request_s; chosen, as that term is, so that cal_refused's burst of "
                         "24 refusals has its live head span in simulation. Apart from per_request_s because a "
                         "refusal costs about half an admitted request (0.8 against 1.6 ms under a 0.5 CPU "
                         "quota): charged a whole request each, bad_requests' refusals held its good requests "
                         "in the simulation's queue for 24 ms where live they waited 7 (live/sim 0.42x in CI)",
    "reference_s": "the yardstick (harness/machine/speed.py: transformers' own GPT-2 decode step at batch 1 and 8, "
                   "none of our engine's code), timed beside the engine terms on the machine that made them; "
                   "`pairs`: our engine's decode burst over the yardstick's burst beside it, per batch "
                   "(harness.machine.cost_model.engine_pairs). Drift is judged as the same pairs now over these, so a "
                   "slower machine is not a slower engine",
    "send_buffer_bytes": "bytes a client with the default receive buffer absorbs before the server's writes block",
    "server_side_buffer_bytes": "the server's share of that (`streamlab lab buffers`)",
    "read_window_bytes": "[SO_RCVBUF, bytes]: what one read returns from a receive buffer the sender keeps "
                         "full, for a client that sets SO_RCVBUF and pauses between reads (`streamlab lab "
                         "buffers`); interpolated between the sizes measured. Empty: a read takes all that arrived",
}


@dataclass(frozen=True)
class StepCostProfile:
    model: str
    decode_s: list  # [[batch, seconds], ...] in increasing batch
    prefill_fixed_s: float
    prefill_per_token_s: float
    idle_step_s: float = 0.0001
    decode_per_context_token_s: float = 0.0
    decode_context_ref: float = 0.0
    serving_s: list = field(default_factory=list)  # [[events in a step, seconds beyond the engine], ...]
    serving_per_byte_s: float = 0.0
    client_per_byte_s: float = 0.0
    per_request_s: float = 0.0
    request_latency_s: float = 0.0
    refused_request_s: float | None = None  # None: a refused request costs per_request_s (a fit before FIT 5)
    send_buffer_bytes: int = DEFAULT_SEND_BUFFER_BYTES  # to a client with the default receive buffer
    server_side_buffer_bytes: int = DEFAULT_SEND_BUFFER_BYTES // 2  # the server's share (`lab buffers`)
    read_window_bytes: list = field(default_factory=list)  # [[SO_RCVBUF, bytes one read returns], ...]
    machine: str = ""
    reference_s: dict = field(default_factory=dict)  # the yardstick when the engine terms were measured (harness.machine.speed)
    calibration: dict = field(default_factory=dict)  # how the serving terms were measured, with residuals

    def steps_scaled(self, k: float) -> "StepCostProfile":
        """The same server whose steps take k times as long: the engine and serving terms times k.
        A request's own terms (per_request_s, refused_request_s, request_latency_s) are not a
        step's and stay."""
        return replace(self, decode_s=[[b, v * k] for b, v in self.decode_s], prefill_fixed_s=self.prefill_fixed_s * k,
                       prefill_per_token_s=self.prefill_per_token_s * k, idle_step_s=self.idle_step_s * k,
                       decode_per_context_token_s=self.decode_per_context_token_s * k,
                       serving_s=[[e, v * k] for e, v in self.serving_s], serving_per_byte_s=self.serving_per_byte_s * k,
                       client_per_byte_s=self.client_per_byte_s * k)

    def request_cost(self, refused: bool) -> float:
        """The server's core time for one request: one it refuses while reading it, or any other."""
        return self.refused_request_s if refused and self.refused_request_s is not None else self.per_request_s

    def buffer_bytes(self, client_rcvbuf: int | None) -> int:
        """Unread bytes a connection holds before the server's writes block."""
        if client_rcvbuf is None:
            return self.send_buffer_bytes
        return self.server_side_buffer_bytes + 2 * client_rcvbuf  # the kernel doubles SO_RCVBUF

    def read_window(self, client_rcvbuf: int | None) -> int | None:
        """The most one read returns to a client with this SO_RCVBUF (None: no limit)."""
        if client_rcvbuf is None or not self.read_window_bytes:
            return None
        return max(1, int(_interpolate(self.read_window_bytes, client_rcvbuf)))

    def engine_cost(self, out: StepOutput) -> float:
        """The engine alone, in-process: what a real step in the simulation should take."""
        return self.engine_time(out.decoded, out.prefilled, out.prefill_tokens, out.decode_context)

    def engine_time(self, decoded: int, prefilled: int = 0, prefill_tokens: int = 0,
                    decode_context: int | None = None) -> float:
        """None for decode_context: the sequences are at the reference context."""
        cost = self.idle_step_s + (self.decode_cost(decoded, decode_context) if decoded else 0.0)
        return cost + self.prefill_fixed_s * prefilled + self.prefill_per_token_s * prefill_tokens

    def decode_cost(self, batch: int, context: int | None = None) -> float:
        """A decode step of `batch` sequences attending to `context` tokens in all."""
        longer = 0.0 if context is None else context - batch * self.decode_context_ref
        return max(0.0, _interpolate(self.decode_s, batch) + self.decode_per_context_token_s * longer)

    def serving_cost(self, events: int) -> float:
        """What handing over a step's events adds in the live server."""
        return _interpolate(self.serving_s, events) if self.serving_s and events else 0.0

    def served_decode(self, batch: int) -> float:
        """A decode step of this batch in the live server (each stream's token handed over)."""
        return self._served(self.engine_time(batch), batch)

    def served_cost(self, out: StepOutput) -> float:
        """The same work in the live server: the engine, plus delivering its events."""
        return self._served(self.engine_cost(out), len(out.tokens) + len(out.finished))

    def logged_cost(self, step: dict) -> float:
        """What the simulation charges for the step a step-log entry (/debug/steps) records."""
        engine_s = self.engine_time(step["decoded"], step["prefilled"], step["prompt_tokens"],
                                    step.get("decode_context") or None)
        return self._served(engine_s, step["events"])

    def _served(self, engine_s: float, events: int) -> float:
        return max(self.idle_step_s, engine_s + self.serving_cost(events))

    def save(self, path: Path | None = None) -> Path:
        path = path or PROFILES / f"{self.model}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        data = asdict(self)
        data["terms"] = {k: TERMS[k] for k in TERMS}
        path.write_text(json.dumps(data, indent=2) + "\n")
        return path


def decode_only(step: dict) -> bool:
    """A step-log entry that only decoded (no prompt, or prompt chunk, in it)."""
    return bool(step["decoded"]) and not step["prefilled"] and not step["prompt_tokens"]


def load_profile(model: str, path: Path | None = None) -> StepCostProfile:
    """The committed profile of `model` (scenarios/profiles/), or the one at `path`."""
    path = path or PROFILES / f"{model}.json"
    if not path.exists():
        raise FileNotFoundError(f"no step-cost profile for model {model!r} ({path}); "
                                f"make one with `streamlab scenario calibrate --model {model}`")
    data = json.loads(path.read_text())
    known = {f.name for f in fields(StepCostProfile)}
    return StepCostProfile(**{k: v for k, v in data.items() if k in known})


def _interpolate(points: list, x: float) -> float:
    """Linear between measured [x, y] points (increasing x), extended past the last two."""
    for (x0, y0), (x1, y1) in zip(points, points[1:]):
        if x <= x1 or [x1, y1] == list(points[-1]):
            return y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    return points[0][1]


def _fit(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least squares y = a + b x."""
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    return max(my - b * mx, 0.0), max(b, 0.0)


def calibrate_engine(model_name: str, repeats: int = 3) -> StepCostProfile:
    """The engine terms, measured in-process on this machine, on the cores and with the torch
    threads a live server gets, and the yardstick timed before and after them (harness.machine.speed)."""
    from harness.machine import speed

    before = speed.measure(model_name)
    with torch_threads(server_threads()):  # as the live server runs (harness.machine.cores)
        profile = _calibrate_engine(model_name, repeats)
    after = speed.measure(model_name)
    both = speed.Reading(model_name, {b: (before.decode_s[b] * after.decode_s[b]) ** 0.5 for b in before.decode_s})
    return replace(profile, reference_s={**both.as_dict(), "pairs": engine_pairs(model_name)})


PAIR_READINGS = 5  # engine_speed() readings a profile's pairs are the median of


def with_pairs_read_here(profile: StepCostProfile, model_name: str) -> StepCostProfile:
    """`profile` with its drift pairs read again on this machine now, its other terms kept
    (`scenario calibrate --pairs-only`; the engine over the yardstick differs by CPU)."""
    return replace(profile, reference_s={**profile.reference_s, "pairs": engine_pairs(model_name)})


def engine_pairs(model_name: str, readings: int = PAIR_READINGS) -> dict[str, float]:
    """The drift check's base: our engine's decode burst over the yardstick's burst beside it
    (streamlab.bench_step.engine_speed, the reading the check takes at run time, read the same
    way), per batch, the median of `readings`. Judged against this, an unchanged engine reads
    about 1.0 on any machine. Against the profile's engine term over the yardstick's time, two
    figures measured apart and by different loops, it read 0.76-0.93, which left a 1.5x
    slowdown as little as 1.14x under a 1.25x bound."""
    from streamlab.bench_step import engine_speed
    from streamlab.config import EngineConfig
    from streamlab.models import load_model

    loaded = load_model(model_name)
    with torch_threads(server_threads()):
        reads = [engine_speed(loaded, EngineConfig().decode_attention)["engine_over_yardstick"]
                 for _ in range(readings)]
    return {b: round(statistics.median(r[b] for r in reads), 4) for b in reads[0]}


def _calibrate_engine(model_name: str, repeats: int) -> StepCostProfile:
    from streamlab.bench_step import fixed_length_prompts, paged_step_ms
    from streamlab.config import CacheConfig, EngineConfig
    from streamlab.engine.engine import BatchEngine
    from streamlab.models import load_model
    from streamlab.sampling import SamplingParams

    loaded = load_model(model_name)
    batches = [1, 2, 4, 8, 16, 32]
    steps, warmup, short, long = 10, 2, 32, 288
    prompts = fixed_length_prompts(loaded, max(batches), short)

    def decode_ms(batch: int, prompts: list[list[int]]) -> float:
        return statistics.median(statistics.median(paged_step_ms(loaded, prompts[:batch], steps, warmup))
                                 for _ in range(repeats))

    decode = [decode_ms(b, prompts) for b in batches]
    # A timed step's sequences hold the prompt, the first token and the warm-up and earlier steps' tokens.
    context_ref = short + 1 + warmup + (steps - 1) / 2
    long_contexts = [(p * (long // short + 1))[:long] for p in prompts]  # timing only: any ids will do
    per_context = statistics.median((decode_ms(b, long_contexts) - d) / 1e3 / (b * (long - short))
                                    for b, d in zip(batches, decode) if b >= 4)
    lengths = [8, 32, 64, 128]
    long_prompts = [t for p in fixed_length_prompts(loaded, 8, 32) for t in p]  # 256 tokens of real text
    prefill = []
    for n in lengths:
        times = []
        for _ in range(repeats * 3):
            engine = BatchEngine(loaded.model, EngineConfig(max_batch=1, cache=CacheConfig(num_blocks=32)))
            engine.submit("p", long_prompts[:n], SamplingParams(max_new_tokens=1))
            t0 = time.perf_counter()
            engine.step()
            times.append(time.perf_counter() - t0)
        prefill.append(statistics.median(times))
    prefill_fixed, per_token = _fit(lengths, prefill)
    return StepCostProfile(model_name, [[b, round(d / 1e3, 7)] for b, d in zip(batches, decode)], prefill_fixed,
                           per_token, decode_per_context_token_s=max(0.0, per_context),
                           decode_context_ref=context_ref, machine=machine_name())


def machine_name() -> str:
    from streamlab.bench_step import machine
    m = machine()
    return f"{m['processor']}, {m['cpus']} CPUs, torch {m['torch']} on {server_threads()} thread(s)"
