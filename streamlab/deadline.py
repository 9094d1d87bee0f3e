"""The deadline gate (the chapter's exercise 5): predict a request's first-token time from the
queue ahead of it and the step costs measured so far; refuse it before the first byte when its
deadline cannot be met. No clock and no I/O here: the hub feeds steps in and asks.

The predictor, in short:
- A step costs about `fixed + per_row x rows` (rows: decode tokens plus prompt tokens in it),
  fitted by least squares over the last steps the server ran. Until enough are seen there is
  nothing to predict with, and the gate admits (hub.py): refusing on a guess would refuse a
  fresh server's every request under a tight deadline, and it would never run a step to learn.
- Prompt tokens ahead: those of running sequences not yet prefilled, of every waiting request,
  and the request's own. With chunked prefill a step carries the running decodes and fills the
  rest of its budget with them; without it they run as one long prefill before the next decode.
- If no batch slot is free for it, it first waits for one: each slot frees when its sequence's
  output is done, and every waiting request ahead takes the first slot to free for its whole
  output; the wait is then that many full-batch steps, and its own prompt follows.
- Otherwise: the steps that clear the tokens ahead, plus half a step for the one running now.
"""

from __future__ import annotations

import heapq
import math
import statistics
import threading
from collections import deque
from dataclasses import dataclass


@dataclass(frozen=True)
class QueueSnapshot:
    """What a prediction needs to know about the engine, read under its lock."""
    max_batch: int
    step_token_budget: int  # 0: whole prompts prefilled before the decode
    chunk_tokens: int
    running_unprefilled: list[int]  # prompt tokens still to prefill, per running sequence
    running_remaining: list[int]  # output tokens still to make, per running sequence
    waiting_prompts: list[int]  # prompt tokens of each waiting request, in order
    waiting_outputs: list[int]  # max_new_tokens of each waiting request, in order


class StepCostModel:
    """step seconds ~ fixed + per_row x rows, over the most recent steps."""

    def __init__(self, window: int = 128, prior_fixed_s: float = 0.01, prior_per_row_s: float = 0.001,
                 min_points: int = 8) -> None:
        self.points: deque[tuple[int, float]] = deque(maxlen=window)
        self.prior = (prior_fixed_s, prior_per_row_s)
        self.min_points = min_points
        self._fit: tuple[float, float] | None = None
        self._lock = threading.Lock()  # the step thread observes, the event loop predicts

    def observe(self, rows: int, seconds: float) -> None:
        if rows > 0:
            with self._lock:
                self.points.append((rows, seconds))
                self._fit = None

    def measured(self) -> bool:
        """Enough steps seen for a fit (before that, coefficients() is the prior, a guess)."""
        with self._lock:
            return len(self.points) >= self.min_points

    def coefficients(self) -> tuple[float, float]:
        with self._lock:
            if self._fit is None:
                self._fit = self._least_squares(list(self.points))
            return self._fit

    def _least_squares(self, points: list[tuple[int, float]]) -> tuple[float, float]:
        if len(points) < self.min_points:
            return self.prior
        xs = [r for r, _ in points]
        ys = [s for _, s in points]
        mx, my = statistics.fmean(xs), statistics.fmean(ys)
        var = sum((x - mx) ** 2 for x in xs)
        if var == 0:  # every step the same size: no slope to fit, charge it all per row
            return 0.0, my / mx
        slope = max(sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / var, 0.0)
        return max(my - slope * mx, 0.0), slope

    def step_s(self, rows: int) -> float:
        fixed, per_row = self.coefficients()
        return fixed + per_row * rows


def predict_ttft_s(q: QueueSnapshot, prompt_tokens: int, costs: StepCostModel) -> float:
    """Seconds from now to a new request's first token, if it were admitted now."""
    decoding = len(q.running_remaining) - sum(1 for u in q.running_unprefilled if u)
    slot_steps = _steps_until_a_slot(q)
    if slot_steps:
        # It waits behind a full batch; once in, only its own prompt is left ahead of it.
        own = math.ceil(prompt_tokens / _room(q, q.max_batch)) if q.step_token_budget else 1
        busy = q.max_batch + (_room(q, q.max_batch) if q.step_token_budget else 0)
        return slot_steps * costs.step_s(q.max_batch) + own * costs.step_s(busy)
    ahead = sum(q.running_unprefilled) + sum(q.waiting_prompts) + prompt_tokens
    in_progress = 0.5 * costs.step_s(decoding + min(ahead, q.step_token_budget or ahead))
    if q.step_token_budget:
        room = _room(q, decoding)
        return in_progress + math.ceil(ahead / room) * costs.step_s(decoding + room)
    # Whole prompts: their prefill runs before the step's decode, and the first token comes with it.
    return in_progress + costs.step_s(ahead) + costs.step_s(decoding)


def _room(q: QueueSnapshot, decoding: int) -> int:
    """Prompt tokens a chunked step carries beside `decoding` decodes."""
    return max(q.step_token_budget - decoding, q.chunk_tokens)


def _steps_until_a_slot(q: QueueSnapshot) -> int:
    """Decode steps until a batch slot is free for a request queued behind the waiting ones: each
    slot frees when its sequence's output is done, and each waiting request, in order, takes
    the first slot to free for its whole output."""
    free_at = sorted(q.running_remaining) + [0] * (q.max_batch - len(q.running_remaining))
    heapq.heapify(free_at)
    for out in q.waiting_outputs:
        heapq.heappush(free_at, heapq.heappop(free_at) + out)
    return free_at[0]
