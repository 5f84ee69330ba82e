"""Memory planning that knows sharding (`training.memory_plan`): one rank's share under
`train.parallel=fsdp`, the block sizes it gathers against the built models, the dry run's
verdicts (fits only sharded / fits nowhere, refused before anything starts), and the docs'
table for the GPT-2-small, 1B and 7B shapes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from train_helpers import compose

from models import ModelConfig, build_model
from models.accounting import ACT_BYTES, GB, count_params, memory_estimate
from training import memory_plan
from training.config import TrainConfig
from training.memory_plan import block_params, step_memory

ROOT = Path(__file__).resolve().parents[1]
LLAMA = dict(
    vocab_size=1000,
    max_seq_len=128,
    n_layers=3,
    d_model=64,
    n_heads=4,
    n_kv_heads=2,
    norm="rmsnorm",
    pos_encoding="rope",
    mlp="swiglu",
    tie_embeddings=False,
    bias=False,
)
FAMILIES = {
    "decoder": {},
    "encoder": {"family": "encoder"},
    "encoder_decoder": {"family": "encoder_decoder", "n_encoder_layers": 2, "n_decoder_layers": 3},
    "moe": {"mlp": "moe", "n_experts": 4, "top_k": 2, "moe_granularity": 3, "moe_every": 2},
}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_block_sizes_are_the_built_models(family):
    """What FSDP gathers per block and what stays in the root, counted on the real modules."""
    from training.parallel import blocks

    cfg = ModelConfig(**{**LLAMA, **FAMILIES[family]})
    model = build_model(cfg)
    sizes = [sum(p.numel() for p in b.parameters()) for b in blocks(model)]
    assert block_params(cfg) == (max(sizes), sum(sizes))


def test_fsdp_holds_one_rank_share_of_the_state_plus_the_gathered_blocks():
    cfg = ModelConfig(**LLAMA)
    n = count_params(cfg).total
    largest, in_blocks = block_params(cfg)
    root = n - in_blocks
    for precision in ("fp32", "bf16"):
        e = ACT_BYTES[precision]
        ddp = step_memory(cfg, 128, 4, precision, "cuda", "ddp", world=4)
        assert ddp == memory_estimate(cfg, 128, 4, precision, "cuda")  # every rank: everything
        fsdp = step_memory(cfg, 128, 4, precision, "cuda", "fsdp", world=4)
        assert fsdp.optimizer == 8 * n // 4
        assert fsdp.params == 4 * n // 4 + root * e + 2 * largest * e
        assert fsdp.grads == 4 * n // 4 + root * 4 + 2 * largest * 4
        copies = e * (n - count_params(cfg).norms) if e < 4 else 0  # autocast's, not FSDP2's
        assert fsdp.activations == ddp.activations - copies
        assert step_memory(cfg, 128, 4, precision, "cuda", "fsdp", world=1) == ddp


def test_activation_checkpointing_keeps_block_inputs_and_one_block():
    from models.accounting import _layer_activations

    cfg = ModelConfig(**LLAMA)
    plain = step_memory(cfg, 128, 4, "bf16")
    ac = step_memory(cfg, 128, 4, "bf16", activation_checkpointing=True)
    one = _layer_activations(cfg, 128, 4, 2, True)
    assert plain.activations - ac.activations == 3 * one - 3 * 4 * 128 * 4 * 64 - one
    assert ac.total < plain.total


def test_micro_batch_auto_fits_more_sequences_sharded():
    """A device where one sequence per micro-batch just fits unsharded: sharded over 8 ranks,
    7/8 of the AdamW state is freed and auto picks a larger micro-batch, the largest that fits."""
    from training.step import auto_micro_batch

    cfg = ModelConfig(**LLAMA)
    gb = step_memory(cfg, 128, 1, "bf16", "cuda").total / 0.9 / GB * 1.001
    ddp = TrainConfig(batch_tokens=8 * 4096, seq_len=128, micro_batch="auto", device_memory_gb=gb)
    fsdp = TrainConfig(**{**ddp.to_dict(), "parallel": "fsdp"})
    assert auto_micro_batch(ddp, cfg, world_size=8, cuda=True) == 1
    micro = auto_micro_batch(fsdp, cfg, world_size=8, cuda=True)
    sharded = {m: step_memory(cfg, 128, m, "bf16", "cuda", "fsdp", 8) for m in (micro, 2 * micro)}
    assert micro > 1 and sharded[micro].total <= 0.9 * gb * GB < sharded[2 * micro].total


def test_a_point_that_fits_only_sharded_says_so_and_one_that_fits_nowhere_is_refused(tmp_path):
    from sweeps import plan
    from sweeps.driver import facts

    base = ["model=llama", "model.d_model=1024", "model.n_layers=8", "train.seq_len=256"]
    base += ["train.batch_tokens=4096", f"paths.runs_dir={tmp_path}", "train.precision=bf16"]
    # 0.1 G parameters: 1.5 GiB of weights, gradients and AdamW state unsharded
    only = facts(compose(*base, "train.device_memory_gb=1.5"), world=8)
    assert only.memory_gb > 1.5 and "fits only sharded" in only.memory_note
    assert "train.parallel=fsdp over its 8 ranks" in only.memory_note
    sharded = facts(compose(*base, "train.device_memory_gb=1.5", "train.parallel=fsdp"), world=8)
    assert sharded.memory_gb < 1.5 and sharded.memory_note == ""
    with pytest.raises(plan.PlanError) as refused:
        facts(compose(*base, "train.device_memory_gb=0.2", "train.parallel=fsdp"), world=8)
    line = str(refused.value)
    assert line.startswith("train.micro_batch: a point (pre-rmsnorm-rope-gqa2-swiglu n_layers=8 ")
    assert re.search(r"needs [\d.]+ GiB \(weights, gradients, AdamW [\d.]+ \+ activations", line)
    assert "0.18 GiB usable per device" in line


def test_docs_memory_table_is_what_the_planner_computes():
    """docs/training.md's table regenerates identically (`python -m training.memory_plan`)."""
    text = (ROOT / "docs" / "training.md").read_text()
    assert memory_plan.shapes_table() in text
