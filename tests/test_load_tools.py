"""Issue 44: load tools no one here wrote, against `streamlab serve`'s OpenAI routes: vLLM's own
`vllm bench serve` and guidellm (both installed by `scripts/dev setup --targets`), with 0 failed
requests on both routes. Their figures are printed beside the run's counts."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess

import pytest

from harness.format.target import VLLM_SERVER_ENV
from harness.live.backend import EXPORTS
from harness.live.process import export_folder
from harness.targets.engines import guidellm, guidellm_missing, vllm, vllm_missing
from streamlab.config import CacheConfig, EngineConfig, ServiceConfig
from tests.asgi import assert_clean
from tests.live import live_server
from tests.peers import missing_peer

PROMPTS, CONCURRENCY = 64, 32

# The same load through our own harness, straight to the same server (no Toxiproxy), so the two
# tools' figures can be set side by side.
SAME_LOAD = f"""\
name: same_load
modes: [live]
seed: 1
max_clients_at_once: {CONCURRENCY}
target: {{url: "URL", api: openai-completions, profile: streamlab}}
server: {{model: tiny, max_batch: {CONCURRENCY}}}
groups:
  - name: clients
    count: {PROMPTS}
    prompt: {{tokens: [16, 16]}}
    request: {{max_new_tokens: 16, ignore_eos: true}}
    behaviour: {{kind: reader}}
    network: {{direct: true}}
expect:
  finish_reasons: {{clients: {{length: {PROMPTS}}}}}
"""


def ours(url: str, folder) -> dict[str, float]:
    """TTFT p50, inter-token gap p50 (ms) and output tokens/s of the same load, as our harness reads it."""
    from harness.format.load import load
    from harness.record.trace import percentile
    from harness.run.runner import RunContext, run_scenario

    path = folder / "same_load.yaml"
    path.write_text(SAME_LOAD.replace("URL", url))
    ctx = RunContext(results_dir=None)
    try:
        outcome = run_scenario(load(path), "live", ctx)
    finally:
        ctx.close()
    assert outcome.ok, outcome.failures()
    streams = outcome.trace.streams
    gaps = [b - a for s in streams for a, b in zip(s.token_times, s.token_times[1:])]
    span = max(s.token_times[-1] for s in streams) - min(s.sent_at for s in streams)
    return {"ttft_ms": percentile([s.token_times[0] - s.sent_at for s in streams], 50) * 1e3,
            "itl_ms": percentile(gaps, 50) * 1e3, "tokens_per_s": sum(len(s.token_times) for s in streams) / span}


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
        mine = ours(server.url, tmp_path) if backend == "openai" else None
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-3000:]
    result = json.loads((tmp_path / "bench.json").read_text())
    assert result["completed"] == PROMPTS, out[-3000:]
    assert result.get("failed", 0) == 0 and result["total_output_tokens"] == PROMPTS * 16, result
    print(f"vllm bench serve --backend {backend}: {result['completed']}/{PROMPTS} completed; TTFT p50 "
          f"{result['median_ttft_ms']:.1f} ms, ITL p50 {result['median_itl_ms']:.2f} ms, "
          f"{result['output_throughput']:.0f} output tokens/s")
    if mine is not None:  # the same load, measured by both tools on the same server, one after the other
        theirs = {"ttft_ms": result["median_ttft_ms"], "itl_ms": result["median_itl_ms"],
                  "tokens_per_s": result["output_throughput"]}
        print("same load, our harness / vllm bench serve: " + ", ".join(
            f"{k} {mine[k]:.2f} / {theirs[k]:.2f} ({mine[k] / theirs[k]:.2f}x)" for k in theirs))


@pytest.mark.slow
@pytest.mark.parametrize("request_format", ["/v1/completions", "/v1/chat/completions"])
def test_guidellm_completes_every_request(request_format, tiny, tmp_path):
    """guidellm's openai_http backend checks GET /health before it starts (a 404 there stopped it)
    and streams with stream_options {include_usage, continuous_usage_stats} (vLLM's extension: a
    422 for every request until it was implemented), stop: null and ignore_eos: true."""
    if guidellm_missing():
        missing_peer(guidellm_missing())
    tokenizer = export_folder("tiny", EXPORTS / "tiny-hf")  # its synthetic prompts are made with our tokenizer
    config = ServiceConfig(engine=EngineConfig(max_batch=CONCURRENCY, cache=CacheConfig(num_blocks=1024)))
    out_file = tmp_path / "guidellm.json"
    with live_server(config, tiny) as server:
        done = subprocess.run(
            [str(guidellm()), "run",
             "--backend", f"kind=openai_http,target=http://127.0.0.1:{server.port},model=tiny,"
                          f"request_format={request_format}",
             "--profile", f"kind=concurrent,streams={CONCURRENCY}", "--constraint", f"kind=max_requests,count={PROMPTS}",
             "--tokenizer", f"kind=hf_auto,model={tokenizer.resolve()}",
             "--data", "kind=synthetic_text,prompt_tokens=16,output_tokens=16",
             "--output", f"kind=json,path={out_file}", "--disable-console"],
            capture_output=True, text=True, timeout=300, cwd=tmp_path)
        assert_clean(asyncio.run(server.settle()))  # nothing held after its streams
        mine = ours(server.url, tmp_path) if request_format == "/v1/completions" else None
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-3000:]
    bench = json.loads(out_file.read_text())["benchmarks"][0]
    requests = bench["requests"]
    errors = [r.get("error") for r in requests["errored"] + requests["incomplete"]]
    assert len(requests["successful"]) == PROMPTS and not errors, errors[:3]
    metrics = bench["metrics"]
    output = metrics["output_token_count"]["successful"]
    assert output["total_sum"] == PROMPTS * 16, output
    ttft, itl = metrics["time_to_first_token_ms"]["successful"], metrics["inter_token_latency_ms"]["successful"]
    theirs = {"ttft_ms": ttft["median"], "itl_ms": itl["median"], "tokens_per_s": output["total_sum"] / bench["duration"]}
    print(f"guidellm {request_format}: {len(requests['successful'])}/{PROMPTS} completed; TTFT p50 "
          f"{theirs['ttft_ms']:.1f} ms, ITL p50 {theirs['itl_ms']:.2f} ms, {theirs['tokens_per_s']:.0f} output tokens/s")
    if mine is not None:  # the same load, measured by both tools on the same server, one after the other
        print("same load, our harness / guidellm: " + ", ".join(
            f"{k} {mine[k]:.2f} / {theirs[k]:.2f} ({mine[k] / theirs[k]:.2f}x)" for k in theirs))
