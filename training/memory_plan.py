"""The memory of one rank's training step as the run will train it: `train.parallel` over its
ranks, `train.activation_checkpointing`, the micro-batch. What the dry run's `mem` column
shows, what `train.micro_batch=auto` fits, and what refuses a point before it is submitted.

    ddp    every rank: the whole fp32 weights, gradients and AdamW moments (16 bytes per
           parameter) and one micro-batch's activations (`models.accounting.memory_estimate`)
    fsdp   every rank: 1/world of those 16 bytes per parameter, plus what FSDP2 gathers
           (training/parallel.py): the root's parameters (embeddings, head, final norm: kept
           gathered from the forward to the backward), two blocks' parameters in the compute
           precision (the one computing and the one prefetched) and two blocks' unsharded fp32
           gradients (the one computed and the one being reduce-scattered). FSDP2 casts while
           gathering, so autocast's weight copies are not held.

Activation checkpointing keeps, per block, only its input (the residual stream) and the
activations of the one block being recomputed.
"""

from __future__ import annotations

from dataclasses import dataclass

from models.accounting import (
    ACT_BYTES,
    GB,
    MemoryEstimate,
    _layer_activations,
    count_params,
    layer_params,
    memory_estimate,
    mlp_params,
    norm_params,
)

# Left for the allocator's fragmentation and the CUDA context: a step fits in 90% of a device.
HEADROOM = 0.9


def block_params(cfg) -> tuple[int, int]:
    """(parameters of the largest block, of all blocks together)."""
    attn, _, norms = layer_params(cfg)
    mlps = [mlp_params(cfg, cfg.layer_mlp(i))[0] for i in range(cfg.n_layers)]
    largest = attn + max(mlps) + norms
    if cfg.family == "encoder_decoder":  # decoder blocks: cross-attention and its norm too
        largest += attn + norm_params(cfg)
    pc = count_params(cfg)
    in_blocks = pc.attention + pc.mlp + pc.cross_attention
    in_blocks += (cfg.encoder_layers + cfg.decoder_layers) * norms
    if cfg.family == "encoder_decoder":
        in_blocks += cfg.decoder_layers * norm_params(cfg)
    return largest, in_blocks


def step_memory(
    cfg,
    seq_len: int,
    micro_batch: int,
    precision: str,
    device: str = "cuda",
    parallel: str = "ddp",
    world: int = 1,
    activation_checkpointing: bool = False,
) -> MemoryEstimate:
    """One rank's peak (see the module docstring); `params` and `grads` include what FSDP
    gathers, `activations` what the step saves for its backward."""
    whole = memory_estimate(cfg, seq_len, micro_batch, precision, device)
    n, e = count_params(cfg).total, ACT_BYTES[precision]
    acts = whole.activations
    if activation_checkpointing:
        layers = cfg.encoder_layers + cfg.decoder_layers
        fused = device == "cuda"
        one = _layer_activations(cfg, seq_len, micro_batch, e, fused)
        acts += -layers * one + layers * 4 * seq_len * micro_batch * cfg.d_model + one
    if parallel != "fsdp" or world == 1:
        return MemoryEstimate(whole.params, whole.grads, whole.optimizer, acts)
    if e < 4:  # autocast's weight copies (memory_estimate counts them): FSDP2 casts instead
        acts -= e * (n - count_params(cfg).norms)
    largest, in_blocks = block_params(cfg)
    root = n - in_blocks
    gathered_params = root * e + 2 * largest * e
    gathered_grads = root * 4 + 2 * largest * 4
    return MemoryEstimate(
        params=-(-4 * n // world) + gathered_params,
        grads=-(-4 * n // world) + gathered_grads,
        optimizer=-(-8 * n // world),
        activations=acts,
    )


def fits(estimate: MemoryEstimate, device_bytes: float) -> bool:
    return estimate.total <= HEADROOM * device_bytes


def largest_micro_batch(
    cfg, seq_len: int, per_rank: int, precision: str, device_bytes: float, **how
) -> int | None:
    """The largest divisor of `per_rank` sequences whose `step_memory` (with `how`: parallel,
    world, activation_checkpointing) fits `device_bytes`; None if none does."""
    for micro in sorted((m for m in range(1, per_rank + 1) if per_rank % m == 0), reverse=True):
        if fits(step_memory(cfg, seq_len, micro, precision, "cuda", **how), device_bytes):
            return micro
    return None


@dataclass(frozen=True)
class Verdict:
    """Where a point's step fits on its device: as configured, only sharded, or nowhere."""

    estimate: MemoryEstimate  # as configured (parallel, world, micro-batch)
    sharded: MemoryEstimate  # the same step under fsdp over the same ranks
    device_bytes: float | None
    world: int

    @property
    def fits(self) -> bool:
        return self.device_bytes is None or fits(self.estimate, self.device_bytes)

    @property
    def only_sharded(self) -> bool:
        """Over the device as configured (ddp), under it with fsdp on the same ranks."""
        return not self.fits and self.world > 1 and fits(self.sharded, self.device_bytes)

    @property
    def nowhere(self) -> bool:
        return not self.fits and not self.only_sharded

    def note(self) -> str:
        """'' when it fits; else what the point needs, in GiB, and what would make it fit."""
        if self.fits:
            return ""
        have = HEADROOM * self.device_bytes / GB
        need = _gib(self.estimate)
        if self.only_sharded:
            return (
                f"needs {need} per rank with ddp, over the {have:.3g} GiB usable per "
                f"device; fits only sharded: {_gib(self.sharded)} with train.parallel=fsdp "
                f"over its {self.world} ranks"
            )
        shard = f"; sharded over its {self.world} ranks {_gib(self.sharded)}"
        return (
            f"needs {need} per rank{shard if self.world > 1 else ''}, over the "
            f"{have:.3g} GiB usable per device: more ranks (train.parallel=fsdp), "
            "train.activation_checkpointing=true, a smaller train.micro_batch or a smaller model"
        )


def _gib(m: MemoryEstimate) -> str:
    states = (m.params + m.grads + m.optimizer) / GB
    acts = m.activations / GB
    return (
        f"{m.total / GB:.3g} GiB (weights, gradients, AdamW {states:.3g} + activations {acts:.3g})"
    )


def verdict(cfg, train, micro_batch: int, precision: str, world: int, device_bytes) -> Verdict:
    """`train`'s step on `world` ranks as configured, and as it would be sharded."""
    how = {"world": world, "activation_checkpointing": train.activation_checkpointing}
    args = (cfg, train.seq_len, micro_batch, precision, "cuda")
    return Verdict(
        estimate=step_memory(*args, parallel=train.parallel, **how),
        sharded=step_memory(*args, parallel="fsdp", **how),
        device_bytes=device_bytes,
        world=world,
    )


# The shapes of the docs' table (docs/training.md, "ddp or fsdp"): GPT-2 small, OLMo-1B's and
# Llama-2-7B's, trained in bf16 at micro-batch 1 of 2048 tokens (GPT-2: its 1024).
LLAMA_BLOCK = dict(
    norm="rmsnorm", pos_encoding="rope", mlp="swiglu", tie_embeddings=False, bias=False
)
SHAPES = {
    "GPT-2 small": dict(d_model=768, n_layers=12, n_heads=12, vocab_size=50257, max_seq_len=1024),
    "1B (OLMo-1B)": dict(
        d_model=2048,
        n_layers=16,
        n_heads=16,
        d_ff=8192,
        vocab_size=50304,
        max_seq_len=2048,
        **LLAMA_BLOCK,
    ),
    "7B (Llama-2-7B)": dict(
        d_model=4096,
        n_layers=32,
        n_heads=32,
        d_ff=11008,
        vocab_size=32000,
        max_seq_len=2048,
        **LLAMA_BLOCK,
    ),
}
DEVICES_GB = (80, 141)  # H100 / A100 80 GB, H200 141 GB
TABLE_RANKS = 8  # one node of 8 GPUs


def shapes_table() -> str:
    """Markdown: per shape, one rank's estimated GiB under ddp and under fsdp over 8 ranks (with
    and without activation checkpointing), and which fits each device."""
    from models import ModelConfig

    head = (
        f"| shape | N | ddp GiB | fsdp x{TABLE_RANKS} GiB | fsdp x{TABLE_RANKS} + AC GiB | "
        + " | ".join(f"{gb} GB" for gb in DEVICES_GB)
        + " |"
    )
    lines = [head, "|" + "---|" * (5 + len(DEVICES_GB))]
    for name, shape in SHAPES.items():
        cfg = ModelConfig(**shape)
        seq = shape["max_seq_len"]
        ddp = step_memory(cfg, seq, 1, "bf16")
        fsdp = step_memory(cfg, seq, 1, "bf16", parallel="fsdp", world=TABLE_RANKS)
        ac = step_memory(
            cfg, seq, 1, "bf16", parallel="fsdp", world=TABLE_RANKS, activation_checkpointing=True
        )
        cells = []
        for gb in DEVICES_GB:
            room = gb * 1e9  # a GPU's "80 GB" are 10^9 bytes
            cells.append(
                "ddp"
                if fits(ddp, room)
                else "fsdp"
                if fits(fsdp, room)
                else "fsdp + AC"
                if fits(ac, room)
                else "no"
            )
        n = count_params(cfg).total
        row = [name, f"{n / 1e9:.2f}B", *(f"{m.total / GB:.1f}" for m in (ddp, fsdp, ac)), *cells]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(shapes_table())
