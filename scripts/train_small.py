"""Train the `stdlib-small` preset: a small GPT-2 whose text reads, for the page and the demo.

Trained on CPU in a few minutes on the standard library's docstrings and comments (the text
the shipped tokenizer and prompts come from, scripts/build_tokenizer.py), and written to
streamlab/assets/stdlib-small.safetensors in float16 (committed, so nobody needs to run this).
`tiny`, with random weights, stays the preset for tests: its near-ties make identity checks
stronger than a trained model's confident choices would.

Run: python scripts/train_small.py [--seconds 240]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from build_tokenizer import corpus  # noqa: E402

from streamlab.models import hf_config_for  # noqa: E402
from streamlab.presets import PRESETS  # noqa: E402
from streamlab.tokenizer import shipped_tokenizer  # noqa: E402

OUT = Path(__file__).resolve().parent.parent / "streamlab" / "assets" / "stdlib-small.safetensors"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=240.0, help="training time budget")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--seq", type=int, default=96)
    args = parser.parse_args()
    from safetensors.torch import save_file
    from transformers import GPT2LMHeadModel

    torch.manual_seed(0)
    random.seed(0)
    preset = PRESETS["stdlib-small"]
    tokenizer = shipped_tokenizer()
    eos = tokenizer.eos_token_id
    texts = corpus()
    ids: list[int] = []
    for text in texts:
        ids += tokenizer.encode(text) + [eos]
    data = torch.tensor(ids, dtype=torch.long)
    print(f"corpus: {len(texts)} texts, {len(ids):,} tokens")
    model = GPT2LMHeadModel(hf_config_for(preset.shape, eos))
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    t0, step, loss_avg = time.perf_counter(), 0, None
    while time.perf_counter() - t0 < args.seconds:
        starts = torch.randint(0, len(data) - args.seq - 1, (args.batch,))
        batch = torch.stack([data[s:s + args.seq] for s in starts])
        lr = 3e-3 * max(0.1, 1 - (time.perf_counter() - t0) / args.seconds)
        for group in opt.param_groups:
            group["lr"] = lr
        loss = model(batch, labels=batch).loss
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        loss_avg = loss.item() if loss_avg is None else 0.98 * loss_avg + 0.02 * loss.item()
        if step % 50 == 0:
            print(f"step {step}: loss {loss_avg:.3f} ({time.perf_counter() - t0:.0f} s)")
    state = {k: v.detach().to(torch.float16).contiguous() for k, v in model.state_dict().items()
             if k != "lm_head.weight" and not k.endswith(".attn.bias") and not k.endswith(".attn.masked_bias")}
    save_file(state, str(OUT), metadata={"steps": str(step), "loss": f"{loss_avg:.3f}",
                                         "seconds": f"{args.seconds:g}", "python": sys.version.split()[0]})
    print(f"wrote {OUT} ({OUT.stat().st_size / 1e6:.1f} MB) after {step} steps, loss {loss_avg:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
