"""llama.cpp's own `llama-server` on our weights (`streamlab export --format gguf`): it splits a
prompt into the same tokens as we do, and makes the same greedy tokens as our engine, or parts
from them only where our own top-2 logits are a near-tie (reported with the margin)."""

from __future__ import annotations

import asyncio

import httpx
import pytest
import torch

from harness.engines import llama_server, llama_server_missing
from harness.live import TargetProcess
from streamlab.config import CacheConfig, EngineConfig
from streamlab.engine.engine import BatchEngine
from streamlab.export import export_model
from streamlab.models import load_model
from streamlab.prompts import shipped_prompts
from streamlab.sampling import SamplingParams, top2_margin
from tests.helpers import drain

pytestmark = pytest.mark.skipif(llama_server_missing() is not None, reason=llama_server_missing() or "")

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


@pytest.mark.parametrize("preset", ["tiny", "stdlib-small", "gpt2-small-random"])
def test_llama_server_on_our_gguf_makes_our_greedy_tokens(preset, tmp_path):
    loaded = load_model(preset)
    gguf = export_model(loaded, tmp_path, "gguf")
    server = TargetProcess("llama-server", [str(llama_server()), "-m", str(gguf), "--host", "127.0.0.1",
                                            "--port", "{port}", "-np", "1", "-c", "1024"],
                           {}, "/health", start_deadline_s=60, log_dir=tmp_path)
    asyncio.run(server.start())
    try:
        base = f"http://127.0.0.1:{server.port}"
        agreed, parted = 0, []
        with httpx.Client(base_url=base, timeout=60) as http:
            for text in shipped_prompts()[:PROMPTS]:
                prompt = loaded.tokenizer.encode(text)
                theirs_prompt = http.post("/tokenize", json={"content": text}).json()["tokens"]
                assert theirs_prompt == prompt, f"{text!r}: llama-server splits it as {theirs_prompt}, we as {prompt}"
                # Both stop at end of text: llama.cpp's ignore_eos bans the token (its logit set to
                # -inf) where ours generates it and goes on, so the two would part there.
                got = http.post("/completion", json={
                    "prompt": prompt, "n_predict": NEW_TOKENS, "temperature": 0, "cache_prompt": False,
                    "return_tokens": True, "stream": False}).json()
                theirs, mine = before_eos(got["tokens"], loaded.model.eos_token_id), ours(loaded, prompt)
                if theirs == mine:
                    agreed += 1
                    continue
                k = next((i for i, (a, b) in enumerate(zip(mine, theirs)) if a != b), min(len(mine), len(theirs)))
                assert k < min(len(mine), len(theirs)), f"{text[:30]!r}: ours {mine}, llama-server {theirs}"
                margin = margin_at(loaded, prompt + mine[:k])
                parted.append(f"{text[:30]!r}: first divergence at token {k} (ours {mine[k]}, llama-server "
                              f"{theirs[k]}), our top-2 logit margin there {margin:.2e}")
                assert margin < NEAR_TIE, parted[-1] + f": not a near-tie (under {NEAR_TIE:g})"
        print(f"{preset}: {agreed} of {PROMPTS} prompts equal (up to {NEW_TOKENS} tokens or end of text); "
              + "; ".join(parted))
        assert agreed >= PROMPTS - 1, parted  # a near-tie may part one prompt; more is not chance
    finally:
        server.stop()
