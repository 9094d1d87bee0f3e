"""Foreign engines on our weights: llama.cpp's own `llama-server` on `streamlab export --format
gguf`, vLLM's CPU backend on `streamlab export`. Each splits a prompt into the same tokens as we
do, and makes the same greedy tokens as our engine, or parts from them only where our own top-2
logits are a near-tie (reported with the margin)."""

from __future__ import annotations

import asyncio
from typing import Callable

import httpx
import pytest
import torch

from harness.format.target import VLLM_MIN_HEAD, VLLM_SERVER_ENV
from harness.targets.engines import llama_server, llama_server_missing, vllm, vllm_missing
from harness.live.process import TargetProcess
from tests.peers import needs_peer
from streamlab.config import CacheConfig, EngineConfig
from streamlab.engine.engine import BatchEngine
from streamlab.export import export_model
from streamlab.models import load_model
from streamlab.presets import PRESETS
from streamlab.prompts import shipped_prompts
from streamlab.sampling import SamplingParams, top2_margin
from tests.helpers import drain

NEW_TOKENS = 32
PROMPTS = 6
# Two kernels that sum in different orders agree to about 1e-5 in float32 logits; a top-2 margin
# below this is a coin toss between them, not a defect in either.
NEAR_TIE = 1e-3


def before_eos(tokens: list[int], eos: int) -> list[int]:
    return tokens[:tokens.index(eos)] if eos in tokens else tokens


def ours(loaded, prompt: list[int]) -> list[int]:
    engine = BatchEngine(loaded.model, EngineConfig(max_batch=1))
    engine.submit("a", prompt, SamplingParams(max_new_tokens=NEW_TOKENS))
    return before_eos(drain(engine).tokens["a"], loaded.model.eos_token_id)


def margin_at(loaded, context: list[int]) -> float:
    model = loaded.model
    cache = model.new_cache(CacheConfig(num_blocks=CacheConfig().blocks_for(len(context)) + 1))
    return top2_margin(model.prefill(context, torch.arange(len(context)), cache))


def compare_greedy(name: str, loaded, tokenize: Callable[[str], list[int]],
                   generate: Callable[[list[int]], list[int]]) -> None:
    """Every shipped prompt split alike, and its greedy tokens (up to NEW_TOKENS or end of text:
    llama.cpp's ignore_eos bans the token where ours generates it and goes on) equal to ours, or
    parted at a near-tie; at most one prompt may part."""
    agreed, parted = 0, []
    for text in shipped_prompts()[:PROMPTS]:
        prompt = loaded.tokenizer.encode(text)
        theirs_prompt = tokenize(text)
        assert theirs_prompt == prompt, f"{text!r}: {name} splits it as {theirs_prompt}, we as {prompt}"
        theirs, mine = before_eos(generate(prompt), loaded.model.eos_token_id), ours(loaded, prompt)
        if theirs == mine:
            agreed += 1
            continue
        k = next((i for i, (a, b) in enumerate(zip(mine, theirs)) if a != b), min(len(mine), len(theirs)))
        assert k < min(len(mine), len(theirs)), f"{text[:30]!r}: ours {mine}, {name} {theirs}"
        margin = margin_at(loaded, prompt + mine[:k])
        parted.append(f"{text[:30]!r}: first divergence at token {k} (ours {mine[k]}, {name} {theirs[k]}), "
                      f"our top-2 logit margin there {margin:.2e}")
        assert margin < NEAR_TIE, parted[-1] + f": not a near-tie (under {NEAR_TIE:g})"
    print(f"{name} on {loaded.name}: {agreed} of {PROMPTS} prompts equal (up to {NEW_TOKENS} tokens or end of "
          f"text); " + "; ".join(parted))
    assert agreed >= PROMPTS - 1, parted  # a near-tie may part one prompt; more is not chance


def serving(server: TargetProcess):
    asyncio.run(server.start())
    return httpx.Client(base_url=f"http://127.0.0.1:{server.port}", timeout=120)


@needs_peer(llama_server_missing())
@pytest.mark.parametrize("preset", ["tiny", "stdlib-small", "gpt2-small-random"])
def test_llama_server_on_our_gguf_makes_our_greedy_tokens(preset, tmp_path):
    loaded = load_model(preset)
    gguf = export_model(loaded, tmp_path, "gguf")
    server = TargetProcess("llama-server", [str(llama_server()), "-m", str(gguf), "--host", "127.0.0.1",
                                            "--port", "{port}", "-np", "1", "-c", "1024"],
                           {}, "/health", start_deadline_s=60, log_dir=tmp_path)
    try:
        with serving(server) as http:
            compare_greedy("llama-server", loaded, lambda text: http.post("/tokenize", json={"content": text}).json()["tokens"],
                           lambda prompt: http.post("/completion", json={
                               "prompt": prompt, "n_predict": NEW_TOKENS, "temperature": 0, "cache_prompt": False,
                               "return_tokens": True, "stream": False}).json()["tokens"])
    finally:
        server.stop()


@pytest.mark.slow
@needs_peer(vllm_missing())
@pytest.mark.parametrize("preset", [p for p, spec in PRESETS.items()
                                    if spec.shape.n_embd // spec.shape.n_head >= VLLM_MIN_HEAD])
def test_vllm_on_our_export_makes_our_greedy_tokens(preset, tmp_path):
    loaded = load_model(preset)
    folder = export_model(loaded, tmp_path / preset)
    server = TargetProcess("vllm", [str(vllm()), "serve", str(folder), "--host", "127.0.0.1", "--port", "{port}",
                                    "--enforce-eager", "--dtype", "float32",
                                    "--max-model-len", str(loaded.model.shape.n_positions)],
                           {}, "/health", start_deadline_s=180, log_dir=tmp_path, env=VLLM_SERVER_ENV)
    try:
        with serving(server) as http:
            compare_greedy("vLLM", loaded,
                           lambda text: http.post("/tokenize", json={"model": str(folder), "prompt": text,
                                                                     "add_special_tokens": False}).json()["tokens"],
                           lambda prompt: http.post("/v1/completions", json={
                               "model": str(folder), "prompt": prompt, "max_tokens": NEW_TOKENS, "temperature": 0,
                               "return_token_ids": True}).json()["choices"][0]["token_ids"])
    finally:
        server.stop()
