"""Size ladder: achieved N close to the target (documented bounds), fine distinct spacing,
attention kind and other architecture fields kept, and config `size` plumbing."""

from __future__ import annotations

import dataclasses
import math

import pytest

from models import ModelConfig, count_params
from models.ladder import (
    ASPECT,
    ASPECT_BAND,
    config_for_size,
    model_config,
    shape_for_size,
    size_ladder,
)

BASES = [
    ModelConfig(),  # gpt2-like MHA GELU
    ModelConfig(n_kv_heads=1, mlp="swiglu", bias=False, norm_position="post"),  # MQA
    ModelConfig(n_kv_heads=2, mlp="swiglu", bias=False, norm="rmsnorm", pos_encoding="rope"),
]
GQA4 = ModelConfig(n_heads=8, n_kv_heads=2, mlp="swiglu")
# (lo, hi, bound for BASES, bound for GQA4) as documented in models/ladder.py
BOUNDS = [
    (5e4, 2e5, 0.12, None),
    (2e5, 1e6, 0.08, 0.12),
    (1e6, 1e7, 0.03, 0.06),
    (1e7, 1e8, 0.02, 0.02),
]


def _targets(lo, hi, n=40):
    return [lo * (hi / lo) ** (i / (n - 1)) for i in range(n)]


@pytest.mark.parametrize("base", [*BASES, GQA4], ids=lambda c: c.arch)
def test_achieved_size_within_documented_bound(base):
    for lo, hi, bound, gqa4_bound in BOUNDS:
        bound = gqa4_bound if base is GQA4 else bound
        if bound is None:
            continue
        for target in _targets(lo, hi):
            cfg = config_for_size(target, base)
            n = count_params(cfg).non_embedding
            assert abs(n / target - 1) <= bound, (target, n, cfg)
            assert cfg.arch == base.arch
            aspect = cfg.d_model / cfg.n_layers
            assert ASPECT / ASPECT_BAND <= aspect <= ASPECT * ASPECT_BAND


@pytest.mark.parametrize("base", [*BASES, GQA4], ids=lambda c: c.arch)
def test_ladder_gives_distinct_finely_spaced_sizes(base):
    rungs = size_ladder(5e4, 1e8, base, per_decade=5)
    assert len(rungs) == len({r.shape for r in rungs}) >= 5 * math.log10(1e8 / 5e4)
    ns = [r.n_params for r in rungs]
    assert ns == sorted(ns) and len(set(ns)) == len(ns)
    assert all(
        r.n_params == count_params(config_for_size(r.target, base)).non_embedding for r in rungs
    )


def test_ladder_keeps_everything_but_the_shape():
    base = BASES[2]
    cfg = config_for_size(3e6, base)
    assert cfg.n_heads // cfg.kv_heads == 2
    changed = {k for k, v in cfg.to_dict().items() if v != getattr(base, k)}
    assert changed <= {"n_layers", "d_model", "n_heads", "n_kv_heads"}
    assert shape_for_size(3e6, base) == shape_for_size(3e6, base)  # pure


def test_mha_and_mqa_kinds_are_kept():
    assert config_for_size(1e6, BASES[0]).n_kv_heads is None
    mqa = config_for_size(1e6, BASES[1])
    assert mqa.kv_heads == 1 and mqa.n_heads > 1


def test_from_dict_size_uses_the_ladder():
    d = {**BASES[2].to_dict(), "size": 3e6}
    cfg = model_config(d)
    assert cfg == config_for_size(3e6, BASES[2])
    assert abs(count_params(cfg).non_embedding / 3e6 - 1) <= 0.03
    assert model_config({**d, "size": None}) == BASES[2]


@pytest.mark.parametrize(
    ("size", "match"),
    [(-1, "size must be a positive number"), ("big", "size must be"), (1e3, "outside the ladder")],
)
def test_bad_size_rejected(size, match):
    with pytest.raises(ValueError, match=match):
        model_config({"size": size})


def test_size_with_explicit_d_ff_rejected():
    with pytest.raises(ValueError, match="d_ff must be null when size is set"):
        model_config({"d_ff": 512, "size": 1e6})


MOE_BASES = [
    dataclasses.replace(BASES[2], mlp="moe", n_experts=8, top_k=2, n_shared_experts=1),
    dataclasses.replace(BASES[2], mlp="moe", n_experts=4, top_k=1, moe_every=2),
    dataclasses.replace(BASES[0], mlp="moe", n_experts=4, top_k=2, expert_mlp="gelu", moe_every=3),
]


# as documented in models/ladder.py: a MoE layer's active width is top_k (+ shared) experts
MOE_BOUNDS = [(2e5, 1e6, 0.08), (1e6, 1e7, 0.05)]


@pytest.mark.parametrize("base", MOE_BASES, ids=lambda c: c.arch)
def test_a_moe_size_is_its_active_count(base):
    """A MoE model of size S passes each token through ~S non-embedding parameters, as a dense
    model of size S does (matched compute per token); its ladder count is the exact active
    count, also with dense layers in between (moe_every > 1)."""
    for lo, hi, bound in MOE_BOUNDS:
        for target in _targets(lo, hi, n=12):
            cfg = config_for_size(target, base)
            pc = count_params(cfg)
            assert abs(pc.non_embedding_active / target - 1) <= bound, (target, cfg)
            assert pc.non_embedding > pc.non_embedding_active
            assert cfg.n_layers >= base.moe_every
    rungs = size_ladder(2e5, 1e7, base, per_decade=5)
    assert all(
        r.n_params == count_params(config_for_size(r.target, base)).non_embedding_active
        for r in rungs
    )


@pytest.mark.parametrize("granularity", [2, 4])
def test_a_granularity_is_checked_on_the_shape_the_ladder_chooses(granularity):
    """G must divide the chosen shape's MLP width, not the preset's: llama's d_model 128 has a
    341-wide SwiGLU MLP that G = 2 does not divide, yet with `size` the ladder replaces that
    width, offers only widths G divides, and matches the active count as for G = 1."""
    preset = {**BASES[2].to_dict(), "d_model": 128, "n_heads": 4, "n_layers": 2}
    moe = {**preset, "mlp": "moe", "n_experts": 8, "top_k": 2, "n_shared_experts": 1}
    with pytest.raises(ValueError, match="moe_granularity .* must divide the MLP width"):
        model_config({**moe, "moe_granularity": 2})  # no size: the preset's own width
    for lo, hi, bound in MOE_BOUNDS:
        for target in _targets(lo, hi, n=6):
            cfg = model_config({**moe, "moe_granularity": granularity, "size": target})
            assert cfg.moe_granularity == granularity
            assert cfg.expert_d_ff * granularity == cfg.ffn_dim
            assert abs(count_params(cfg).non_embedding_active / target - 1) <= bound, (target, cfg)
    with pytest.raises(ValueError, match="applies to mlp='moe' only"):
        model_config({**preset, "moe_granularity": 2, "size": 1e6})  # dense: still refused
