"""`streamlab demo`: a few generations run back to back, then together, with a table."""

from __future__ import annotations

import time
from dataclasses import dataclass

from rich.console import Console
from rich.table import Table

from streamlab.config import CacheConfig, EngineConfig
from streamlab.engine.engine import BatchEngine
from streamlab.models import LoadedModel
from streamlab.prompts import prompts_near
from streamlab.sampling import SamplingParams


@dataclass
class Run:
    tokens: dict[str, list[int]]
    first_token_s: dict[str, float]
    seconds: float


def generate(loaded: LoadedModel, prompts: dict[str, list[int]], params: SamplingParams, max_batch: int) -> Run:
    engine = BatchEngine(loaded.model, EngineConfig(max_batch=max_batch, cache=CacheConfig(num_blocks=1024)))
    start = time.perf_counter()
    for rid, ids in prompts.items():
        engine.submit(rid, ids, params)
    tokens: dict[str, list[int]] = {rid: [] for rid in prompts}
    first: dict[str, float] = {}
    while engine.has_work():
        for ev in engine.step().tokens:
            tokens[ev.request_id].append(ev.token_id)
            first.setdefault(ev.request_id, time.perf_counter() - start)
    problems = engine.check_invariants() + engine.check_released()
    if problems:
        raise RuntimeError(f"engine books do not balance: {problems}")
    return Run(tokens, first, time.perf_counter() - start)


def run_demo(loaded: LoadedModel, streams: int, max_new_tokens: int, console: Console) -> bool:
    texts = prompts_near(200, streams)
    prompts = {f"req-{i}": loaded.tokenizer.encode(t) for i, t in enumerate(texts)}
    params = SamplingParams(max_new_tokens=max_new_tokens, ignore_eos=True)
    console.print(f"[bold]streamlab demo[/] model={loaded.name} streams={streams} max_new_tokens={max_new_tokens}")
    solo = {rid: generate(loaded, {rid: ids}, params, max_batch=1) for rid, ids in prompts.items()}
    together = generate(loaded, prompts, params, max_batch=streams)

    table = Table(title="each prompt alone, then all together in one batch")
    for col in ("request", "prompt tok", "new tok", "solo s", "solo tok/s", "batched TTFT s", "identical", "text"):
        table.add_column(col, justify="left" if col in ("request", "text") else "right", no_wrap=True,
                         max_width=28 if col == "text" else None)
    identical = 0
    for rid, ids in prompts.items():
        same = together.tokens[rid] == solo[rid].tokens[rid]
        identical += same
        n = len(together.tokens[rid])
        text = loaded.tokenizer.decode(together.tokens[rid][:12]).replace("\n", " ")
        table.add_row(rid, str(len(ids)), str(n), f"{solo[rid].seconds:.3f}", f"{n / solo[rid].seconds:.0f}",
                      f"{together.first_token_s[rid]:.3f}", "yes" if same else "[red]NO[/]", repr(text)[:40])
    console.print(table)
    total = sum(len(t) for t in together.tokens.values())
    back_to_back = sum(r.seconds for r in solo.values())
    console.print(f"back to back: {total / back_to_back:.0f} tok/s over {back_to_back:.2f} s; "
                  f"together: {total / together.seconds:.0f} tok/s over {together.seconds:.2f} s; "
                  f"speedup {back_to_back / together.seconds:.1f}x; identical to solo: {identical}/{len(prompts)}")
    return identical == len(prompts)
