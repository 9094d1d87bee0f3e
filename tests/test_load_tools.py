"""Issue 44: load tools no one here wrote, against `streamlab serve`'s OpenAI routes: vLLM's own
`vllm bench serve` (installed by `scripts/dev setup --targets`), with 0 failed requests on both
routes. Its figures are printed beside the run's counts."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess

import pytest

from harness.format.target import VLLM_SERVER_ENV
from harness.live.backend import EXPORTS
from harness.live.process import export_folder
from harness.targets.engines import vllm, vllm_missing
from streamlab.config import CacheConfig, EngineConfig, ServiceConfig
from tests.asgi import assert_clean
from tests.live import live_server
from tests.peers import missing_peer

PROMPTS, CONCURRENCY = 64, 32


@pytest.mark.slow
@pytest.mark.parametrize("backend,endpoint", [("openai", "/v1/completions"), ("openai-chat", "/v1/chat/completions")])
def test_vllm_bench_serve_completes_every_request(backend, endpoint, tiny, tmp_path):
    if vllm_missing():
        missing_peer(vllm_missing())
    tokenizer = export_folder("tiny", EXPORTS / "tiny-hf")  # its random prompts are made with our tokenizer
    config = ServiceConfig(engine=EngineConfig(max_batch=CONCURRENCY, cache=CacheConfig(num_blocks=1024)))
    with live_server(config, tiny) as server:
        done = subprocess.run(
            [str(vllm()), "bench", "serve", "--backend", backend, "--base-url", f"http://127.0.0.1:{server.port}",
             "--endpoint", endpoint, "--model", "tiny", "--tokenizer", str(tokenizer), "--dataset-name", "random",
             "--random-input-len", "16", "--random-output-len", "16", "--num-prompts", str(PROMPTS),
             "--max-concurrency", str(CONCURRENCY), "--ignore-eos", "--seed", "0", "--disable-tqdm",
             "--save-result", "--result-dir", str(tmp_path), "--result-filename", "bench.json"],
            capture_output=True, text=True, timeout=300, env={**os.environ, **VLLM_SERVER_ENV})
        assert_clean(asyncio.run(server.settle()))  # nothing held after 64 streams
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-3000:]
    result = json.loads((tmp_path / "bench.json").read_text())
    assert result["completed"] == PROMPTS, out[-3000:]
    assert result.get("failed", 0) == 0 and result["total_output_tokens"] == PROMPTS * 16, result
    print(f"vllm bench serve --backend {backend}: {result['completed']}/{PROMPTS} completed; TTFT p50 "
          f"{result['median_ttft_ms']:.1f} ms, ITL p50 {result['median_itl_ms']:.2f} ms, "
          f"{result['output_throughput']:.0f} output tokens/s")
