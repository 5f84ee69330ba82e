"""The memory estimate of one training step (`models.accounting.memory_estimate`): a hand
computation for one config, Korthikanti et al.'s per-layer formula as its special case,
`train.micro_batch=auto`, and the dry run's column and warning."""

from __future__ import annotations

import pytest

from models import ModelConfig
from models.accounting import (
    LOSS_CHUNK_ELEMENTS,
    count_params,
    largest_micro_batch,
    memory_estimate,
)
from training.config import ConfigError, TrainConfig

LLAMA = dict(
    vocab_size=1000,
    max_seq_len=128,
    n_layers=2,
    d_model=64,
    n_heads=4,
    n_kv_heads=2,
    d_ff=176,
    norm="rmsnorm",
    pos_encoding="rope",
    mlp="swiglu",
    tie_embeddings=False,
    bias=False,
)


def test_estimate_matches_a_hand_computation():
    """d 64, 4 heads of 16, 2 KV heads, SwiGLU 176, 2 layers, V 1000 untied; 8 x 128 tokens
    in bf16 on CUDA (fused attention, no dropout)."""
    cfg = ModelConfig(**LLAMA)
    # parameters: per layer qkv 64 x (4 + 2 x 2) x 16 = 8192, proj 64 x 64 = 4096,
    # SwiGLU 3 x 64 x 176 = 33792, 2 RMSNorm gains 128 = 46208; x 2 layers = 92416;
    # final norm 64; token table and untied head 2 x 1000 x 64 = 128000
    n = 92416 + 64 + 128000
    assert count_params(cfg).total == n == 220480
    est = memory_estimate(cfg, seq_len=128, micro_batch=8, precision="bf16", device="cuda")
    assert (est.params, est.grads, est.optimizer) == (4 * n, 4 * n, 8 * n)
    sbh = 128 * 8 * 64  # s b h = 65536
    attention = 2 * sbh * (1 + 1 + 2 * 0.5 + 1) + 4 * 4 * 128 * 8  # bf16 q|k|v|out; fp32 LSE
    mlp = 2 * 128 * 8 * (64 + 4 * 176)  # input, gate|up, silu, product
    norms = 2 * 4 * sbh  # fp32 inputs of the two norms
    assert (attention, mlp, norms) == (540672, 1572864, 524288)
    head = 2 * 4 * sbh + 4 * 1000 * 64 + 4 * 1024 * 1000  # norm in, dL/dh; dL/dW; one chunk
    weights = 2 * (n - 5 * 64)  # autocast's bf16 copies of every matrix (not the 5 gains)
    assert est.activations == 2 * (attention + mlp + norms) + head + weights == 10592256
    assert est.total == 16 * n + 10592256


def test_per_layer_term_is_korthikanti_with_fp32_norm_inputs():
    """With what the paper assumes (16-bit, dropout, the T x T attention kept, a 4h GELU MLP,
    MHA) one layer costs s b h (34 + 5 a s / h) bytes, plus our norms' fp32 inputs (2 x 2 s b h
    more) and autocast's bf16 copies of the layer's matrices."""
    s, b, h, a = 128, 4, 64, 4
    base = dict(vocab_size=500, max_seq_len=s, d_model=h, n_heads=a, dropout=0.1, bias=False)
    one, two = (ModelConfig(**base, n_layers=n) for n in (1, 2))
    per_layer = (
        memory_estimate(two, s, b, "bf16", device="cpu").activations
        - memory_estimate(one, s, b, "bf16", device="cpu").activations
    )
    matrices = 4 * h * h + 8 * h * h  # attention qkv + proj, MLP 4h up + down
    assert per_layer == s * b * h * (34 + 5 * a * s / h) + 4 * s * b * h + 2 * matrices


def test_fp32_doubles_activation_bytes_and_keeps_no_weight_copies():
    cfg = ModelConfig(**LLAMA)
    bf16 = memory_estimate(cfg, 128, 8, "bf16")
    fp32 = memory_estimate(cfg, 128, 8, "fp32")
    assert fp32.params == bf16.params and fp32.activations > bf16.activations
    assert memory_estimate(cfg, 128, 16, "bf16").activations > bf16.activations


def test_loss_chunk_sizes_agree_with_the_loss():
    from models.loss import CHUNK_ELEMENTS, CHUNK_ELEMENTS_DEFAULT

    assert LOSS_CHUNK_ELEMENTS == {"cuda": CHUNK_ELEMENTS_DEFAULT, **CHUNK_ELEMENTS}


def test_largest_micro_batch_is_the_largest_divisor_that_fits():
    cfg = ModelConfig(**LLAMA)
    fits = {m: memory_estimate(cfg, 128, m, "bf16").total for m in (1, 2, 4, 8, 16)}
    room = fits[4] / 0.9 + 1  # 4 fits with the 10% headroom, 8 does not
    assert largest_micro_batch(cfg, 128, 16, "bf16", room) == 4
    assert largest_micro_batch(cfg, 128, 12, "bf16", room) == 4  # divisors of 12: 1 2 3 4 6 12
    assert largest_micro_batch(cfg, 128, 16, "bf16", fits[1] / 2) is None


def test_micro_batch_auto_is_no_accumulation_without_cuda():
    from training.step import auto_micro_batch, batch_geometry

    tr = TrainConfig(batch_tokens=4096, seq_len=128, micro_batch="auto", device_memory_gb=1e-3)
    cfg = ModelConfig(**LLAMA)
    assert auto_micro_batch(tr, cfg, world_size=1, cuda=False) is None
    assert batch_geometry(tr, 1, None).micro_batch == 32  # what micro_batch=None gives
    with pytest.warns(UserWarning, match="even 1 sequence of 128 tokens"):
        assert auto_micro_batch(tr, cfg, world_size=1, cuda=True) == 1  # 1 MB: nothing fits
    roomy = TrainConfig(batch_tokens=4096, seq_len=128, micro_batch="auto", device_memory_gb=80)
    assert auto_micro_batch(roomy, cfg, world_size=1, cuda=True) == 32


def test_new_fields_are_checked_and_leave_run_keys_alone():
    from training.keys import run_key

    with pytest.raises(ConfigError, match="train.prefetch: must be >= 0"):
        TrainConfig(prefetch=-1)
    with pytest.raises(ConfigError, match="train.device_memory_gb: must be > 0"):
        TrainConfig(device_memory_gb=0)
    with pytest.raises(ConfigError, match="train.micro_batch"):
        TrainConfig(micro_batch="most")
    default = {"train": TrainConfig().to_dict()}
    changed = {"train": TrainConfig(prefetch=0, device_memory_gb=80, micro_batch="auto").to_dict()}
    before = {
        "train": {
            k: v for k, v in default["train"].items() if k not in ("prefetch", "device_memory_gb")
        }
    }
    assert run_key(default) == run_key(changed) == run_key(before)


def test_dry_run_shows_the_estimate_and_warns_when_a_point_does_not_fit():
    from sweeps import plan
    from sweeps.sweep_view import memory_cell, memory_warning

    def point(i, mem, device):
        facts = plan.RunFacts("k", "a", 1, 8, 100, 80, 1e3, 8192.0, 1024, None, mem, device)
        return plan.PlannedRun(i, (), "base", "run", facts)

    runs = [point(0, 0.5, 1.0), point(1, 3.0, 1.0), point(2, 3.0, None)]
    assert [memory_cell(r.facts) for r in runs] == ["0.5G", "3G!", "3G"]
    assert memory_warning(runs).startswith("warning: point(s) 1 are estimated to need more than")
    assert memory_warning(runs[:1]) is None
