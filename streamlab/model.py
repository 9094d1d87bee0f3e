"""GPT-2 forward over the paged cache: forward(batch, cache) -> logits. No sampling.

Batch invariance is built in, so a sequence's logits are bit-identical alone or in any batch:
- Linear layers: a row of `x @ W` on this kind of CPU depends on how many rows the kernel
  sees (1, 2, 3, 5, 6, 7, 9, 10, 11 rows each give other bits than 32), but not on the other
  rows' values or the row's position. Decode batches are padded with zero rows to a multiple
  of `row_quantum`, probed at start-up as the smallest count whose multiples all agree.
- Attention: each sequence's reductions run over a length that depends on its own context
  only (its block count rounded up to a power of two), never on its neighbours'. Sequences
  are grouped by that length and each group is one batched computation whose per-row
  reduction order does not depend on the group's size.
- Prefill runs one prompt at a time, so it is the same computation alone or in a batch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from streamlab.engine.cache import KVCache


@dataclass(frozen=True)
class GPT2Shape:
    vocab_size: int
    n_positions: int
    n_embd: int
    n_layer: int
    n_head: int
    layer_norm_epsilon: float = 1e-5

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head


@dataclass
class LayerWeights:
    ln1_w: torch.Tensor
    ln1_b: torch.Tensor
    attn_w: torch.Tensor  # (C, 3C), Conv1D layout as in transformers
    attn_b: torch.Tensor
    proj_w: torch.Tensor  # (C, C)
    proj_b: torch.Tensor
    ln2_w: torch.Tensor
    ln2_b: torch.Tensor
    fc_w: torch.Tensor  # (C, 4C)
    fc_b: torch.Tensor
    fc2_w: torch.Tensor  # (4C, C)
    fc2_b: torch.Tensor


@dataclass(frozen=True)
class AttentionGroup:
    rows: torch.Tensor  # (G,) rows of the batch in this group
    slots: torch.Tensor  # (G, L) cache slots to attend over, padded with the pad block
    masked: torch.Tensor  # (G, L) True where a position is beyond the sequence's context


@dataclass(frozen=True)
class DecodeBatch:
    token_ids: torch.Tensor  # (B,)
    positions: torch.Tensor  # (B,)
    write_slots: torch.Tensor  # (B,)
    groups: list[AttentionGroup]


def probe_row_quantum(in_features: int, out_features: int, candidates: tuple[int, ...] = (1, 2, 4, 8, 16),
                      max_rows: int = 64) -> int:
    """Smallest row count whose every multiple up to max_rows gives rows bit-equal to max_rows rows."""
    gen = torch.Generator().manual_seed(0)
    w = torch.randn(in_features, out_features, generator=gen) * 0.02
    b = torch.randn(out_features, generator=gen) * 0.02
    x = torch.randn(max_rows, in_features, generator=gen)
    ref = torch.addmm(b, x, w)
    ref_t = F.linear(x, w.t().contiguous())
    for q in candidates:
        if all(torch.equal(torch.addmm(b, x[:m], w), ref[:m]) and
               torch.equal(F.linear(x[:m], w.t().contiguous()), ref_t[:m])
               for m in range(q, max_rows + 1, q)):
            return q
    return max_rows


class GPT2:
    def __init__(self, shape: GPT2Shape, wte: torch.Tensor, wpe: torch.Tensor, layers: list[LayerWeights],
                 lnf_w: torch.Tensor, lnf_b: torch.Tensor, eos_token_id: int | None) -> None:
        self.shape = shape
        self.wte, self.wpe, self.layers = wte, wpe, layers
        self.lnf_w, self.lnf_b = lnf_w, lnf_b
        self.eos_token_id = eos_token_id
        self.scale = 1.0 / math.sqrt(shape.head_dim)
        self.row_quantum = probe_row_quantum(shape.n_embd, 4 * shape.n_embd)

    @classmethod
    def from_hf_state_dict(cls, shape: GPT2Shape, sd: dict[str, torch.Tensor], eos_token_id: int | None) -> "GPT2":
        def get(name: str) -> torch.Tensor:
            return sd[name].detach().float().contiguous()
        layers = [LayerWeights(*(get(f"transformer.h.{i}.{n}") for n in (
            "ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias", "attn.c_proj.weight",
            "attn.c_proj.bias", "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight", "mlp.c_fc.bias",
            "mlp.c_proj.weight", "mlp.c_proj.bias"))) for i in range(shape.n_layer)]
        return cls(shape, get("transformer.wte.weight"), get("transformer.wpe.weight"), layers,
                   get("transformer.ln_f.weight"), get("transformer.ln_f.bias"), eos_token_id)

    def new_cache(self, config) -> KVCache:
        s = self.shape
        return KVCache(s.n_layer, s.n_head, s.head_dim, config)

    def _ln(self, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, (self.shape.n_embd,), w, b, self.shape.layer_norm_epsilon)

    def _mlp(self, x: torch.Tensor, lw: LayerWeights) -> torch.Tensor:
        h = F.gelu(torch.addmm(lw.fc_b, self._ln(x, lw.ln2_w, lw.ln2_b), lw.fc_w), approximate="tanh")
        return x + torch.addmm(lw.fc2_b, h, lw.fc2_w)

    @torch.inference_mode()
    def prefill(self, token_ids: list[int], slots: torch.Tensor, cache: KVCache) -> torch.Tensor:
        """Run one prompt, store its K/V at `slots`, return the last position's logits: (V,)."""
        s = self.shape
        T = len(token_ids)
        x = self.wte[torch.tensor(token_ids)] + self.wpe[:T]  # (T, C)
        for i, lw in enumerate(self.layers):
            qkv = torch.addmm(lw.attn_b, self._ln(x, lw.ln1_w, lw.ln1_b), lw.attn_w)  # (T, 3C)
            q, k, v = (t.view(T, s.n_head, s.head_dim) for t in qkv.split(s.n_embd, dim=1))
            cache.store(i, slots, k, v)
            a = F.scaled_dot_product_attention(q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1),
                                               is_causal=True)  # (nh, T, hs)
            x = x + torch.addmm(lw.proj_b, a.transpose(0, 1).reshape(T, s.n_embd), lw.proj_w)
            x = self._mlp(x, lw)
        return F.linear(self._ln(x[-1:], self.lnf_w, self.lnf_b), self.wte)[0]

    @torch.inference_mode()
    def decode(self, batch: DecodeBatch, cache: KVCache) -> torch.Tensor:
        """One token for each of B sequences, K/V stored at write_slots: logits (B, V)."""
        s = self.shape
        B = batch.token_ids.shape[0]
        M = -(-B // self.row_quantum) * self.row_quantum
        x = torch.zeros(M, s.n_embd)
        x[:B] = self.wte[batch.token_ids] + self.wpe[batch.positions]  # (M, C), rows past B are padding
        for i, lw in enumerate(self.layers):
            qkv = torch.addmm(lw.attn_b, self._ln(x, lw.ln1_w, lw.ln1_b), lw.attn_w)  # (M, 3C)
            q, k, v = (t[:B].reshape(B, s.n_head, s.head_dim) for t in qkv.split(s.n_embd, dim=1))
            cache.store(i, batch.write_slots, k, v)
            attn = torch.zeros(M, s.n_embd)
            for g in batch.groups:
                attn[g.rows] = self._paged_attention(q[g.rows], cache, i, g)
            x = x + torch.addmm(lw.proj_b, attn, lw.proj_w)
            x = self._mlp(x, lw)
        return F.linear(self._ln(x, self.lnf_w, self.lnf_b), self.wte)[:B]

    def _paged_attention(self, q: torch.Tensor, cache: KVCache, layer: int, g: AttentionGroup) -> torch.Tensor:
        # q: (G, nh, hs); k, v: (G, L, nh, hs). Elementwise products and reductions whose
        # per-row order depends on L only, so a row's result does not depend on G.
        k, v = cache.gather(layer, g.slots)
        scores = (q[:, None] * k).sum(-1) * self.scale  # (G, L, nh)
        scores = scores.masked_fill(g.masked[:, :, None], float("-inf"))
        probs = torch.softmax(scores, dim=1)  # (G, L, nh)
        out = (probs[..., None] * v).sum(1)  # (G, nh, hs)
        return out.reshape(out.shape[0], -1)
