"""The step-cost model the simulation advances time by, and the calibration that measures it.

A step costs: fixed + per_seq x (sequences decoded) + prefill_fixed x (prompts prefilled)
+ prefill_per_token x (prompt tokens). `streamlab scenario calibrate` measures the live
engine on this machine and stores a profile per model under scenarios/profiles/.
"""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from streamlab.engine.engine import StepOutput

PROFILES = Path(__file__).resolve().parent.parent / "scenarios" / "profiles"
DEFAULT_SEND_BUFFER_BYTES = 262_144  # bytes a non-reading client absorbs before writes block (`lab buffers`)


@dataclass(frozen=True)
class StepCostProfile:
    model: str
    fixed_s: float
    per_seq_s: float
    prefill_fixed_s: float
    prefill_per_token_s: float
    send_buffer_bytes: int = DEFAULT_SEND_BUFFER_BYTES  # to a client with the default receive buffer
    server_side_buffer_bytes: int = DEFAULT_SEND_BUFFER_BYTES // 2  # the server's share (`lab buffers`)
    idle_step_s: float = 0.0001  # a step that only applied wishes
    machine: str = ""

    def buffer_bytes(self, client_rcvbuf: int | None) -> int:
        """Unread bytes a connection holds before the server's writes block."""
        if client_rcvbuf is None:
            return self.send_buffer_bytes
        return self.server_side_buffer_bytes + 2 * client_rcvbuf  # the kernel doubles SO_RCVBUF

    def step_cost(self, out: StepOutput) -> float:
        cost = self.idle_step_s
        if out.decoded:
            cost += self.fixed_s + self.per_seq_s * out.decoded
        cost += self.prefill_fixed_s * out.prefilled + self.prefill_per_token_s * out.prefill_tokens
        return cost

    def save(self, path: Path | None = None) -> Path:
        path = path or PROFILES / f"{self.model}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(asdict(self), indent=2) + "\n")
        return path


def load_profile(model: str) -> StepCostProfile:
    path = PROFILES / f"{model}.json"
    if not path.exists():
        raise FileNotFoundError(f"no step-cost profile for model {model!r} ({path}); "
                                f"make one with `streamlab scenario calibrate --model {model}`")
    return StepCostProfile(**json.loads(path.read_text()))


def _fit(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least squares y = a + b x."""
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    return max(my - b * mx, 0.0), max(b, 0.0)


def calibrate(model_name: str, repeats: int = 3) -> StepCostProfile:
    from streamlab.bench_step import fixed_length_prompts, machine, paged_step_ms
    from streamlab.config import CacheConfig, EngineConfig
    from streamlab.engine.engine import BatchEngine
    from streamlab.models import load_model
    from streamlab.sampling import SamplingParams

    loaded = load_model(model_name)
    batches = [1, 2, 4, 8, 16, 32]
    prompts = fixed_length_prompts(loaded, max(batches), 32)
    decode = [statistics.median(statistics.median(paged_step_ms(loaded, prompts[:b], 10, 2)) for _ in range(repeats))
              for b in batches]
    fixed, per_seq = _fit(batches, [d / 1e3 for d in decode])
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
    m = machine()
    return StepCostProfile(model_name, fixed, per_seq, prefill_fixed, per_token,
                           machine=f"{m['processor']}, {m['cpus']} CPUs, torch {m['torch']}")
