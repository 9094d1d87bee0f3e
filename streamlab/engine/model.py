"""GPT-2 forward over the paged cache: forward(batch, cache) -> logits. No sampling.

Batch invariance is built in, so a sequence's logits are bit-identical alone or in any batch:
- Linear layers (class Linear): with MKL's addmm a row of `x @ W` on this kind of CPU depends
  on how many rows the kernel sees (1, 2, 3, 5, 6, 7, 9, 10, 11 rows each give other bits
  than 32), but not on the other rows' values or the row's position. oneDNN's prepacked
  linear, used where PyTorch has it, gives every row the same bits at any row count. Decode
  batches are padded with zero rows to a multiple of `row_quantum`, probed at start-up as the
  smallest count whose multiples all agree, for the kernel in use (1 when nothing is needed).
- Attention: each sequence's reductions run over a length that depends on its own context
  only (its block count), never on its neighbours'. Sequences
  are grouped by that length and each group is one batched scaled_dot_product_attention
  whose per-(head, sequence) work does not depend on the group's size.
- Prefill packs several prompts' rows into each matrix product (the kernels above are exact
  at any row count and offset) and runs each prompt's attention on its own.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from streamlab.engine import paged_kernel
from streamlab.engine.cache import KVCache
from streamlab.presets import GPT2Shape


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
    blocks: torch.Tensor  # (G, nb) cache blocks to attend over, padded with the pad block
    masked: torch.Tensor  # (G, L) True where a position is beyond the sequence's context


@dataclass(frozen=True)
class TableAttention:
    """Decode attention through the block tables by the paged kernel (streamlab.engine.paged_kernel)."""
    tables: torch.Tensor  # (B, nb) each sequence's blocks, padded with the pad block
    context: torch.Tensor  # (B,) positions each attends over
    block_size: int


@dataclass(frozen=True)
class DecodeBatch:
    token_ids: torch.Tensor  # (B,)
    positions: torch.Tensor  # (B,)
    write_slots: torch.Tensor  # (B,)
    groups: list[AttentionGroup]  # the gather path: sequences grouped by block count
    table: TableAttention | None = None  # the kernel path: every sequence in one call


@dataclass(frozen=True)
class ChunkInput:
    """Prompt positions start..end-1 of one sequence, run beside a decode batch (chunked prefill)."""
    token_ids: torch.Tensor  # (n,)
    start: int
    slots: torch.Tensor  # (n,) where their K/V go
    blocks: torch.Tensor  # (1, nb) the blocks holding positions 0..end-1, nb = ceil(end / block_size)
    masked: torch.Tensor  # (n, nb * block_size) True where key j is after query i's position (or past end)
    wants_logits: bool  # the chunk ends the prompt: its last position's logits make the first token


class Linear:
    """y = x @ w + b for a Conv1D-layout weight (in, out), with the fastest exact kernel we have.

    oneDNN's prepacked linear (where PyTorch has it) takes the weights in its own blocked layout
    once, instead of MKL repacking them on every call: on a 2-core AVX2 CPU a 32-row decode
    matmul is 2.6x faster, a 4-row one 12x. Its row quantum is probed like the addmm path's.
    """

    def __init__(self, w: torch.Tensor, b: torch.Tensor | None, packed: bool) -> None:
        self.in_features, self.out_features = w.shape
        self.b = b if b is not None else torch.zeros(self.out_features, dtype=w.dtype)
        self.w = w
        self.packed = None
        if packed:
            self.packed = torch.ops.mkldnn._reorder_linear_weight(w.t().contiguous(), 32)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.packed is not None:
            return torch.ops.mkldnn._linear_pointwise(x, self.packed, self.b, "none", [], "")
        return torch.addmm(self.b, x, self.w)


def prepacked_linear_available() -> bool:
    try:
        probe = Linear(torch.ones(4, 4), torch.zeros(4), packed=True)
        return torch.equal(probe(torch.ones(2, 4)), torch.full((2, 4), 4.0))
    except (RuntimeError, AttributeError, NotImplementedError):
        return False


def probe_row_quantum(in_features: int, out_features: int, candidates: tuple[int, ...] = (1, 2, 4, 8, 16),
                      max_rows: int = 64, packed: bool = False, dtype: torch.dtype = torch.float32) -> int:
    """Smallest row count whose every multiple up to max_rows gives rows bit-equal to max_rows rows."""
    gen = torch.Generator().manual_seed(0)
    linear = Linear((torch.randn(in_features, out_features, generator=gen) * 0.02).to(dtype),
                    (torch.randn(out_features, generator=gen) * 0.02).to(dtype), packed)
    x = torch.randn(max_rows, in_features, generator=gen).to(dtype)
    ref = linear(x)
    for q in candidates:
        if all(torch.equal(linear(x[:m]), ref[:m]) for m in range(q, max_rows + 1, q)):
            return q
    return max_rows


@dataclass
class LayerLinears:
    attn: Linear
    proj: Linear
    fc: Linear
    fc2: Linear


class GPT2:
    def __init__(self, shape: GPT2Shape, wte: torch.Tensor, wpe: torch.Tensor, layers: list[LayerWeights],
                 lnf_w: torch.Tensor, lnf_b: torch.Tensor, eos_token_id: int | None) -> None:
        self.shape = shape
        self.wte, self.wpe, self.layers = wte, wpe, layers
        self.lnf_w, self.lnf_b = lnf_w, lnf_b
        self.eos_token_id = eos_token_id
        self.scale = 1.0 / math.sqrt(shape.head_dim)
        self.dtype = wte.dtype  # float32, or bfloat16 for a cast() copy
        self._casts: dict[torch.dtype, GPT2] = {}
        # oneDNN's prepacked path is used for float32; other dtypes take addmm (probed the same way).
        self.prepacked = self.dtype == torch.float32 and prepacked_linear_available()
        self.linears = [LayerLinears(Linear(lw.attn_w, lw.attn_b, self.prepacked),
                                     Linear(lw.proj_w, lw.proj_b, self.prepacked),
                                     Linear(lw.fc_w, lw.fc_b, self.prepacked),
                                     Linear(lw.fc2_w, lw.fc2_b, self.prepacked)) for lw in layers]
        self.lm_head = Linear(wte.t(), None, self.prepacked)
        # Every shape a row goes through: one that differs alone (4C -> C gives other bits at 1 row
        # than at 2+ on this CPU, while C -> 4C does not) sets the quantum for all.
        C = shape.n_embd
        self.row_quantum = max(probe_row_quantum(i, o, packed=self.prepacked, dtype=self.dtype)
                               for i, o in {(C, 3 * C), (C, C), (C, 4 * C), (4 * C, C), (C, shape.vocab_size)})

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

    def cast(self, dtype: torch.dtype) -> "GPT2":
        """This model with every weight in `dtype` (made once, then kept)."""
        if dtype == self.dtype:
            return self
        if dtype not in self._casts:
            def to(t: torch.Tensor) -> torch.Tensor:
                return t.to(dtype).contiguous()
            layers = [LayerWeights(*(to(getattr(lw, f.name)) for f in dataclasses.fields(LayerWeights)))
                      for lw in self.layers]
            self._casts[dtype] = GPT2(self.shape, to(self.wte), to(self.wpe), layers, to(self.lnf_w),
                                      to(self.lnf_b), self.eos_token_id)
        return self._casts[dtype]

    def new_cache(self, config) -> KVCache:
        s = self.shape
        return KVCache(s.n_layer, s.n_head, s.head_dim, config, dtype=self.dtype)

    def _ln(self, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, (self.shape.n_embd,), w, b, self.shape.layer_norm_epsilon)

    def _mlp(self, x: torch.Tensor, lw: LayerWeights, lin: LayerLinears) -> torch.Tensor:
        h = F.gelu(lin.fc(self._ln(x, lw.ln2_w, lw.ln2_b)), approximate="tanh")
        return x + lin.fc2(h)

    def prefill(self, token_ids: list[int], slots: torch.Tensor, cache: KVCache) -> torch.Tensor:
        """Run one prompt, store its K/V at `slots`, return the last position's logits: (V,)."""
        return self.prefill_many([token_ids], [slots], cache)[0]

    @torch.inference_mode()
    def prefill_many(self, prompts: list[list[int]], slots: list[torch.Tensor], cache: KVCache) -> torch.Tensor:
        """Several prompts in one pass: their rows packed into each matrix product, attention per
        prompt. Returns each prompt's last-position logits: (P, V).

        A prompt's results have the same bits in any pass: the prepacked linear, layer norm and
        GELU give a row the same bits at any row count and offset (probed and tested), and each
        prompt's causal attention is its own computation."""
        s = self.shape
        lengths = [len(p) for p in prompts]
        ends = torch.tensor(lengths).cumsum(0)
        N = int(ends[-1])
        x = self.wte[torch.tensor([t for p in prompts for t in p])] + torch.cat([self.wpe[:T] for T in lengths])
        all_slots = torch.cat(slots)
        for i, (lw, lin) in enumerate(zip(self.layers, self.linears)):
            qkv = lin.attn(self._ln(x, lw.ln1_w, lw.ln1_b))  # (N, 3C)
            q, k, v = (t.view(N, s.n_head, s.head_dim) for t in qkv.split(s.n_embd, dim=1))
            cache.store(i, all_slots, k, v)
            attn = torch.empty(N, s.n_embd, dtype=self.dtype)
            start = 0
            for end in ends.tolist():
                a = F.scaled_dot_product_attention(q[start:end].transpose(0, 1), k[start:end].transpose(0, 1),
                                                   v[start:end].transpose(0, 1), is_causal=True)  # (nh, T, hs)
                attn[start:end] = a.transpose(0, 1).reshape(end - start, s.n_embd)
                start = end
            x = x + lin.proj(attn)
            x = self._mlp(x, lw, lin)
        return self.lm_head(self._ln(x[ends - 1], self.lnf_w, self.lnf_b)).float()

    def decode(self, batch: DecodeBatch, cache: KVCache) -> torch.Tensor:
        """One token for each of B sequences, K/V stored at write_slots: logits (B, V)."""
        return self.step_forward(batch, [], cache)

    @torch.inference_mode()
    def step_forward(self, batch: DecodeBatch | None, chunks: list[ChunkInput], cache: KVCache) -> torch.Tensor:
        """A decode batch and prompt chunks in one pass: their rows share every matrix product
        (a row's bits do not depend on the others, see Linear), attention is per decode group and
        per chunk. Logits (B + chunks that end their prompt, V): the decode rows', then those."""
        s = self.shape
        B = 0 if batch is None else batch.token_ids.shape[0]
        sizes = [c.token_ids.shape[0] for c in chunks]
        N = B + sum(sizes)
        M = -(-N // self.row_quantum) * self.row_quantum
        x = torch.zeros(M, s.n_embd, dtype=self.dtype)  # rows past N are padding
        if B:
            x[:B] = self.wte[batch.token_ids] + self.wpe[batch.positions]
        starts = [B + sum(sizes[:j]) for j in range(len(chunks))]
        for c, r in zip(chunks, starts):
            n = c.token_ids.shape[0]
            x[r:r + n] = self.wte[c.token_ids] + self.wpe[c.start:c.start + n]
        slots = torch.cat(([batch.write_slots] if B else []) + [c.slots for c in chunks])
        for i, (lw, lin) in enumerate(zip(self.layers, self.linears)):
            qkv = lin.attn(self._ln(x, lw.ln1_w, lw.ln1_b))  # (M, 3C)
            q, k, v = (t[:N].reshape(N, s.n_head, s.head_dim) for t in qkv.split(s.n_embd, dim=1))
            cache.store(i, slots, k, v)  # every row's K/V first: a chunk attends to itself through the cache
            attn = torch.zeros(M, s.n_embd, dtype=self.dtype)
            if B and batch.table is not None:
                t = batch.table
                attn[:B] = paged_kernel.paged_attention(q[:B], cache.k[i], cache.v[i], t.tables, t.context,
                                                        t.block_size, self.scale).reshape(B, -1)
            for g in (batch.groups if B else []):
                attn[g.rows] = self._paged_attention(q[g.rows], cache, i, g)
            for c, r in zip(chunks, starts):
                n = c.token_ids.shape[0]
                attn[r:r + n] = self._chunk_attention(q[r:r + n], cache, i, c)
            x = x + lin.proj(attn)
            x = self._mlp(x, lw, lin)
        last = [r + c.token_ids.shape[0] - 1 for c, r in zip(chunks, starts) if c.wants_logits]
        rows = torch.cat((torch.arange(B), torch.tensor(last, dtype=torch.long)))
        out = torch.zeros(-(-len(rows) // self.row_quantum) * self.row_quantum, s.n_embd, dtype=self.dtype)
        out[:len(rows)] = x[rows]  # padded to the row quantum again, so each row keeps its bits
        return self.lm_head(self._ln(out, self.lnf_w, self.lnf_b))[:len(rows)].float()

    def _chunk_attention(self, q: torch.Tensor, cache: KVCache, layer: int, c: ChunkInput) -> torch.Tensor:
        # q: (n, nh, hs) for positions start..end-1, attending over the sequence's blocks up to
        # `end` (a length set by the sequence and the chunk's fixed boundary alone).
        k, v = cache.gather(layer, c.blocks)  # (nh, 1, L, hs)
        n = q.shape[0]
        out = F.scaled_dot_product_attention(q.transpose(0, 1), k[:, 0], v[:, 0],
                                             attn_mask=~c.masked[None], scale=self.scale)  # (nh, n, hs)
        return out.transpose(0, 1).reshape(n, -1)

    def _paged_attention(self, q: torch.Tensor, cache: KVCache, layer: int, g: AttentionGroup) -> torch.Tensor:
        # q: (G, nh, hs); k, v: (nh, G, L, hs). One query per sequence and head, attending over
        # L positions (its own context, padded to whole blocks: a length set by that context only).
        # Each (head, sequence) pair is its own unit of work, reduced over L in the same order
        # whatever G is: a row's bits do not depend on its group (tested at GPT-2 small's width).
        k, v = cache.gather(layer, g.blocks)
        G = q.shape[0]
        out = F.scaled_dot_product_attention(q.transpose(0, 1)[:, :, None, :], k, v,
                                             attn_mask=~g.masked[None, :, None, :], scale=self.scale)
        return out[:, :, 0, :].transpose(0, 1).reshape(G, -1)  # (G, nh * hs)
