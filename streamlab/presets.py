"""The model presets' names and shapes, without torch: the harness reads them in target mode,
where the user's server is the engine and ours is not installed (issue 22)."""

from __future__ import annotations

from dataclasses import dataclass


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


@dataclass(frozen=True)
class Preset:
    shape: GPT2Shape
    seed: int
    embed_std: float
    block_std: float
    proj_gain: float  # extra factor on the residual projections (c_proj)
    description: str
    weights: str | None = None  # trained weights shipped in assets/ (else drawn from the seed)
    null: bool = False  # no weights at all: streamlab.null_model makes the tokens


VOCAB = 8192
PRESETS: dict[str, Preset] = {
    # Blocks that outweigh the tied embeddings: with GPT-2's own init a random model repeats
    # its input token forever; these give varied text with realistic near-ties (top-2 logit
    # margins down to ~1e-4), which is what the identity tests need to be worth anything.
    "tiny": Preset(GPT2Shape(VOCAB, 1024, 64, 2, 4), seed=1234, embed_std=0.05, block_std=0.5, proj_gain=2.0,
                   description="2 layers, 64 wide, 4 heads, seeded random weights: for tests"),
    # GPT-2's own init: for benchmarks, where cost depends on shape and not on weights.
    "gpt2-small-random": Preset(GPT2Shape(VOCAB, 1024, 768, 12, 12), seed=1234, embed_std=0.02, block_std=0.02,
                                proj_gain=1 / 24 ** 0.5,
                                description="GPT-2 small's shapes, seeded random weights: for benchmarks"),
    # Trained by scripts/train_small.py on the standard library's docstrings: text that reads,
    # for the page and the demo (tests keep `tiny`, whose near-ties make identity checks stronger).
    "stdlib-small": Preset(GPT2Shape(VOCAB, 256, 128, 3, 4), seed=0, embed_std=0.0, block_std=0.0, proj_gain=1.0,
                           description="3 layers, 128 wide, trained on stdlib docstrings: for the page and demo",
                           weights="stdlib-small.safetensors"),
    # A lab model that makes tokens at almost no cost (streamlab/null_model.py), so that a run
    # measures the harness and the service, with thousands of streams in one batch; --null-step-ms
    # paces its steps.
    "null": Preset(GPT2Shape(VOCAB, 1024, 1, 1, 1), seed=0, embed_std=0.0, block_std=0.0, proj_gain=1.0,
                   description="no weights, tokens at almost no cost: for measuring the harness (lab)", null=True),
}
