"""Decode attention read through the block table (the chapter's exercise 8), as a small C++
extension built on this machine (torch.utils.cpp_extension, g++ and ninja).

The gather path (KVCache.gather, then scaled_dot_product_attention) copies every sequence's
blocks out of the pool into a padded tensor first. This kernel reads each key and value where
it lies: for one (sequence, head) it walks the sequence's own positions through its block
table, scores them, takes the softmax and sums the values. Each (sequence, head) pair is one
sequential computation over its own context, whatever else is in the batch or however the
pairs are split over threads: a sequence's bits do not depend on its neighbours, by
construction. It computes without the GIL. Its results differ from the gather path's in the last bits (another summation
order), so a server runs one path for all its streams and its solo references.

Built once per machine and torch version into the machine's cache (streamlab.cache:
torch_extensions/torch-<version>/, so a fresh clone loads it; `python -m streamlab.engine.paged_kernel`,
run by `scripts/dev setup`); where it cannot be built, `available()` says why and the gather path
is used. The file is named by the source's hash, so a changed kernel is built anew.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import os
import sys
from pathlib import Path

import torch

from streamlab.cache import cache_dir

# -march=native and torch's ABI: a build serves this machine (the cache is its own) and this torch.
BUILD_DIR = cache_dir("torch_extensions") / f"torch-{torch.__version__}"

_SOURCE = r"""
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <cmath>
#include <vector>

// 16 independent lanes, summed in a fixed order at the end: the compiler can vectorize the
// lanes without reassociating anything (-ffast-math is off), so the bits never change.
static inline float dot(const float* a, const float* b, int64_t n) {
  float lane[16] = {0.f};
  int64_t d = 0;
  for (; d + 16 <= n; d += 16)
    for (int j = 0; j < 16; ++j) lane[j] += a[d + j] * b[d + j];
  for (int w = 8; w >= 1; w /= 2)  // a tree, not a chain: four dependent adds instead of sixteen
    for (int j = 0; j < w; ++j) lane[j] += lane[j + w];
  float acc = lane[0];
  for (; d < n; ++d) acc += a[d] * b[d];
  return acc;
}

// q: (B, nh, hs); k, v: one layer of the cache, (nh, slots, hs); tables: (B, nb) block ids;
// context: (B,) positions each sequence attends over. Returns (B, nh, hs).
torch::Tensor paged_attention(torch::Tensor q, torch::Tensor k, torch::Tensor v, torch::Tensor tables,
                              torch::Tensor context, int64_t block_size, double scale) {
  TORCH_CHECK(q.dtype() == torch::kFloat32 && k.dtype() == torch::kFloat32, "float32 only");
  TORCH_CHECK(q.is_contiguous() && k.is_contiguous() && v.is_contiguous(), "contiguous tensors only");
  const int64_t B = q.size(0), nh = q.size(1), hs = q.size(2), slots = k.size(1), nb = tables.size(1);
  auto out = torch::empty_like(q);
  const float* qp = q.data_ptr<float>();
  const float* kp = k.data_ptr<float>();
  const float* vp = v.data_ptr<float>();
  const int64_t* tp = tables.data_ptr<int64_t>();
  const int64_t* cp = context.data_ptr<int64_t>();
  float* op = out.data_ptr<float>();
  const float sc = static_cast<float>(scale);
  // Plain arithmetic on raw pointers from here: the GIL is let go, so the event loop's thread
  // writes to clients while a step's attention runs (12 times a step on GPT-2 small).
  pybind11::gil_scoped_release no_gil;
  at::parallel_for(0, B * nh, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> scores;
    for (int64_t i = begin; i < end; ++i) {
      const int64_t b = i / nh, h = i % nh, ctx = cp[b];
      TORCH_CHECK(ctx >= 1 && ctx <= nb * block_size, "context outside the block table");
      scores.resize(ctx);
      const float* qv = qp + i * hs;
      float top = -INFINITY;
      for (int64_t p = 0; p < ctx; ++p) {
        const int64_t slot = tp[b * nb + p / block_size] * block_size + p % block_size;
        const float* kv = kp + (h * slots + slot) * hs;
        scores[p] = dot(qv, kv, hs) * sc;
        top = std::max(top, scores[p]);
      }
      float total = 0.f;
      for (int64_t p = 0; p < ctx; ++p) {
        scores[p] = std::exp(scores[p] - top);
        total += scores[p];
      }
      float* o = op + i * hs;
      for (int64_t d = 0; d < hs; ++d) o[d] = 0.f;
      for (int64_t p = 0; p < ctx; ++p) {
        const int64_t slot = tp[b * nb + p / block_size] * block_size + p % block_size;
        const float* vv = vp + (h * slots + slot) * hs;
        const float w = scores[p] / total;
        for (int64_t d = 0; d < hs; ++d) o[d] += w * vv[d];
      }
    }
  });
  return out;
}
"""


# The module's name carries a hash of its source, so an edited kernel is never loaded stale.
NAME = "streamlab_paged_attention_" + hashlib.sha1(_SOURCE.encode()).hexdigest()[:12]


@functools.lru_cache(maxsize=1)
def _module():
    built = BUILD_DIR / f"{NAME}.so"
    if built.exists():  # load it as it is: no compiler or ninja needed where it was built at set-up
        spec = importlib.util.spec_from_file_location(NAME, built)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    from torch.utils.cpp_extension import load_inline

    BUILD_DIR.mkdir(parents=True, exist_ok=True)
    # torch finds ninja on PATH; the venv's own (the `ninja` package) sits beside this Python.
    os.environ["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    return load_inline(NAME, cpp_sources=[_SOURCE], functions=["paged_attention"],
                       extra_cflags=["-O3", "-march=native", "-fno-fast-math"], build_directory=str(BUILD_DIR),
                       verbose=False)


@functools.lru_cache(maxsize=1)
def unavailable() -> str | None:
    """None when the kernel is built (or could be built now); else why not."""
    if os.environ.get("STREAMLAB_NO_PAGED_KERNEL"):
        return "STREAMLAB_NO_PAGED_KERNEL is set"
    try:
        _module()
    except Exception as exc:  # no compiler, no ninja, a failed build: the gather path serves
        return f"the paged attention kernel could not be built: {type(exc).__name__}: {str(exc)[:300]}"
    return None


def paged_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, tables: torch.Tensor,
                    context: torch.Tensor, block_size: int, scale: float) -> torch.Tensor:
    """q: (B, nh, hs); k, v: (nh, slots, hs); tables: (B, nb); context: (B,) -> (B, nh, hs)."""
    return _module().paged_attention(q.contiguous(), k, v, tables, context, block_size, scale)


if __name__ == "__main__":  # scripts/dev setup: build it now, so no test or server pays for it
    reason = unavailable()
    print(reason or f"paged attention kernel built in {BUILD_DIR}")
