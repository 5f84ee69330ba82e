"""Export of mixture-of-experts models (issue 42): every MoE combination the factory accepts
either loads in ``transformers`` with our logits within 1e-5 (fp32) or is refused with one line
naming the field, before anything is written. Targets: Qwen3-MoE (QK-norm), Qwen2-MoE (shared
experts behind an exact 0.5 gate), Ernie 4.5-MoE (biases, the aux-free selection bias)."""

from __future__ import annotations

import itertools

import pytest
import torch

import models
from models import ExportError, ModelConfig, build_model
from models.export_hf import hf_target, to_hf
from models.moe import moe_layers

transformers = pytest.importorskip("transformers")
V = 61
# Pre-LN, RMSNorm, RoPE (the only MoE block every HF MoE layout shares), tiny and GQA
TINY = dict(
    vocab_size=V, max_seq_len=16, n_layers=2, d_model=32, n_heads=4, n_kv_heads=2, d_ff=64,
    norm="rmsnorm", pos_encoding="rope", mlp="moe", n_experts=4, bias=False,
)  # fmt: skip


def tiny(**overrides) -> ModelConfig:
    return ModelConfig(**{**TINY, **overrides})


CLASS = {
    "qwen3_moe": "Qwen3MoeForCausalLM",
    "qwen2_moe": "Qwen2MoeForCausalLM",
    "ernie4_5_moe": "Ernie4_5_MoeForCausalLM",
}


def trained_like(cfg: ModelConfig) -> torch.nn.Module:
    """Weights away from init (gains 1, biases 0) and, under aux_free, selection biases large
    enough to change which experts tokens reach: a dropped or misplaced tensor moves the
    logits."""
    torch.manual_seed(0)
    model = build_model(cfg).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
        if cfg.moe_balance == "aux_free":
            for m in moe_layers(model):
                m.select_bias.copy_(0.5 * torch.randn(cfg.n_experts))
    return model


def logits_gap(model, hf) -> float:
    idx = torch.randint(0, V, (2, 16), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ours, theirs = model(idx)[0], hf(idx).logits
    assert ours.shape == theirs.shape
    return (ours - theirs).abs().max().item()


def expected_target(cfg: ModelConfig) -> str:
    """The documented choice (docs/models.md), written out independently of export_hf."""
    if cfg.qk_norm:
        return "qwen3_moe"
    if cfg.bias or cfg.moe_balance == "aux_free":
        return "ernie4_5_moe"
    return "qwen2_moe"


# The brief's grid: shared experts x MoE layer spacing x top-k x granularity; the other axes
# (QK-norm, renormalised top-k, aux-free bias, biases, tied head) vary along it.
GRID = list(itertools.product([0, 1, 2], [1, 2], [1, 3], [1, 2]))


@pytest.mark.parametrize("shared, every, top_k, granularity", GRID)
def test_moe_grid_round_trips_through_auto_model(shared, every, top_k, granularity, tmp_path):
    i = GRID.index((shared, every, top_k, granularity))
    norm_topk = i % 2 == 1
    cfg = tiny(
        n_shared_experts=shared,
        moe_every=every,
        top_k=top_k,
        moe_granularity=granularity,
        qk_norm=shared == 0 and i % 3 == 0,
        moe_norm_topk=norm_topk,
        moe_balance="aux_free" if norm_topk and shared != 0 and i % 4 == 1 else "aux_loss",
        bias=norm_topk and i % 4 == 3,
        tie_embeddings=i % 5 == 0,
    )
    model = trained_like(cfg)
    target = expected_target(cfg)
    assert hf_target(cfg) == target
    out = models.export_hf(model, tmp_path / "hf")
    hf = transformers.AutoModelForCausalLM.from_pretrained(out).eval()
    assert type(hf).__name__ == CLASS[target]
    assert logits_gap(model, hf) <= 1e-5


def test_grid_covers_every_target_and_axis():
    """The grid above reaches each target and each varied axis both ways (else a case of the
    parametrisation silently drops out)."""
    seen = set()
    for shared, every, top_k, g in GRID:
        i = GRID.index((shared, every, top_k, g))
        norm_topk = i % 2 == 1
        seen.add(("qk", shared == 0 and i % 3 == 0))
        seen.add(("aux_free", norm_topk and shared != 0 and i % 4 == 1))
        seen.add(("bias", norm_topk and i % 4 == 3))
    assert seen == {(k, v) for k in ("qk", "aux_free", "bias") for v in (False, True)}


def test_shared_expert_gate_is_exactly_one_half_times_a_doubled_projection():
    cfg = tiny(n_shared_experts=2)
    model = trained_like(cfg)
    hf = to_hf(model)
    block, ours = hf.model.layers[0].mlp, model.blocks[0].mlp.shared
    assert torch.equal(block.shared_expert_gate.weight, torch.zeros(1, cfg.d_model))
    assert torch.equal(block.shared_expert.down_proj.weight, 2 * ours.proj.weight)
    assert block.shared_expert.down_proj.weight.shape == (cfg.d_model, 2 * cfg.expert_d_ff)
    x = torch.randn(5, cfg.d_model)
    gated = torch.sigmoid(block.shared_expert_gate(x)) * block.shared_expert(x)
    with torch.no_grad():
        assert torch.equal(gated, ours(x))  # bit for bit: 0.5 x (2 W h) == W h


def test_aux_free_selection_bias_reaches_the_export():
    cfg = tiny(moe_balance="aux_free", moe_norm_topk=True, n_shared_experts=1)
    model = trained_like(cfg)
    hf = to_hf(model)
    assert type(hf).__name__ == "Ernie4_5_MoeForCausalLM" and logits_gap(model, hf) <= 1e-5
    for layer in hf.model.layers:  # without the bias the routing, hence the logits, differ
        layer.mlp.gate.moe_statics.e_score_correction_bias.data.zero_()
    assert logits_gap(model, hf) > 1e-3


# Every MoE combination of these axes the factory accepts, and which of them no HF layout fits
AXES = {
    "expert_mlp": ["gelu", "swiglu"],
    "n_shared_experts": [0, 1],
    "qk_norm": [False, True],
    "bias": [False, True],
    "moe_norm_topk": [False, True],
    "moe_balance": ["aux_loss", "aux_free"],
    "moe_every": [1, 2],
}
COMBOS = [dict(zip(AXES, values)) for values in itertools.product(*AXES.values())]


def refused_field(c: dict) -> str | None:
    """The field the refusal names, None where a layout fits (docs/models.md's table)."""
    if c["expert_mlp"] == "gelu":
        return "expert_mlp"
    if c["qk_norm"] and c["n_shared_experts"]:
        return "n_shared_experts"
    if c["moe_balance"] == "aux_free" and (c["qk_norm"] or not c["moe_norm_topk"]):
        return "moe_balance"
    if c["qk_norm"] and c["bias"] and c["moe_every"] > 1:
        return "bias"  # Qwen3-MoE's dense MLPs have none
    if not c["qk_norm"] and c["bias"] and not c["moe_norm_topk"]:
        # Qwen2-MoE has no biases, Ernie renormalises; the nearest is Qwen3-MoE (QK-norm) when
        # that is its one miss, else Qwen2-MoE (Qwen3-MoE has neither shared experts nor
        # biases in dense MLPs)
        return "qk_norm" if c["moe_every"] == 1 and not c["n_shared_experts"] else "bias"
    return None


def test_every_moe_combination_exports_exactly_or_refuses_in_one_line():
    exported = 0
    for c in COMBOS:
        cfg = tiny(**c)
        field = refused_field(c)
        if field is None:
            model = trained_like(cfg)
            assert logits_gap(model, to_hf(model)) <= 1e-5, c
            exported += 1
            continue
        with pytest.raises(ExportError) as err:
            hf_target(cfg)
        message = str(err.value)
        assert message.startswith(f"{field}=") and "\n" not in message, (c, message)
    assert exported == 26  # of 128 (64 have GELU experts): the rest are refused


@pytest.mark.parametrize(
    "overrides, field",
    [
        (dict(expert_mlp="gelu"), "expert_mlp"),
        (dict(qk_norm=True, n_shared_experts=2), "n_shared_experts"),
        (dict(qk_norm=True, moe_balance="aux_free"), "moe_balance"),
        (dict(moe_balance="aux_free"), "moe_balance"),  # no moe_norm_topk
        (dict(norm="layernorm"), "norm"),
        (dict(pos_encoding="learned"), "pos_encoding"),
        (dict(norm_position="post"), "norm_position"),
    ],
)
def test_unexportable_moe_model_names_the_field_and_writes_nothing(overrides, field, tmp_path):
    model = build_model(tiny(**overrides))
    with pytest.raises(ExportError) as err:
        models.export_hf(model, tmp_path / "hf")
    message = str(err.value)
    assert message.startswith(f"{field}=") and "\n" not in message
    assert not (tmp_path / "hf").exists()
