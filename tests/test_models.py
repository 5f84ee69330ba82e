"""Model factory: every axis combination builds and trains, the analytic parameter count is
exact, and the bad-input errors name the field."""

from __future__ import annotations

import dataclasses
import itertools
import typing

import pytest
import torch

from models import ModelConfig, build_model, count_params
from models.config import default_d_ff
from models.registry import BLOCKS, MLPS, NORMS, POSITIONS

TINY = dict(vocab_size=61, max_seq_len=16, n_layers=2, d_model=32, n_heads=4)
AXES = {
    "norm_position": ["pre", "post"],
    "norm": ["layernorm", "rmsnorm"],
    "pos_encoding": ["sinusoidal", "learned", "rope", "alibi", "none"],
    "n_kv_heads": [None, 2, 1],  # MHA, GQA, MQA
    "mlp": ["gelu", "swiglu", "moe"],  # moe: 8 SwiGLU experts, top 2 (the defaults)
}
COMBOS = [dict(zip(AXES, values)) for values in itertools.product(*AXES.values())]


def tiny(**overrides) -> ModelConfig:
    return ModelConfig(**{**TINY, **overrides})


@pytest.mark.parametrize("axes", COMBOS, ids=lambda a: "-".join(map(str, a.values())))
def test_every_combination_builds_trains_and_counts(axes):
    torch.manual_seed(0)
    # alternate tying and bias so both settings meet every other axis value
    flip = COMBOS.index(axes) % 2 == 0
    qk_norm = COMBOS.index(axes) % 3 == 0  # QK-norm meets every other axis value too
    cfg = tiny(**axes, tie_embeddings=flip, bias=not flip, qk_norm=qk_norm)
    model = build_model(cfg)
    idx = torch.randint(0, cfg.vocab_size, (2, cfg.max_seq_len))
    logits, loss = model(idx, idx)
    assert logits.shape == (2, cfg.max_seq_len, cfg.vocab_size)
    assert loss.ndim == 0 and torch.isfinite(loss)
    loss.backward()
    params = list(model.parameters())
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in params)
    pc = count_params(cfg)
    assert pc.total == sum(p.numel() for p in params)
    assert pc.total == pc.non_embedding + pc.embedding
    assert (pc.non_embedding_active < pc.non_embedding) == (cfg.mlp == "moe")
    assert model(idx)[1] is None


def test_non_embedding_convention_tied_equals_untied():
    tied, untied = count_params(tiny(tie_embeddings=True)), count_params(tiny(tie_embeddings=False))
    assert tied.non_embedding == untied.non_embedding
    assert untied.total - tied.total == untied.head == 61 * 32
    learned, rope = (
        count_params(tiny(pos_encoding="learned")),
        count_params(tiny(pos_encoding="rope")),
    )
    assert learned.non_embedding == rope.non_embedding
    assert learned.embedding - rope.embedding == 16 * 32  # the position table


def test_initial_loss_is_near_uniform():
    torch.manual_seed(0)
    cfg = tiny(vocab_size=512)
    idx, targets = torch.randint(0, 512, (2, 4, 16))
    _, loss = build_model(cfg)(idx, targets)
    assert abs(loss.item() - torch.log(torch.tensor(512.0)).item()) < 0.1


def test_initialisation_follows_documented_scheme():
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=1000, n_layers=8, d_model=256, n_heads=4, bias=True)
    model = build_model(cfg)
    block = model.blocks[3]
    assert block.attn.qkv.weight.std().item() == pytest.approx(0.02, rel=0.03)
    assert block.mlp.fc.weight.std().item() == pytest.approx(0.02, rel=0.03)
    resid_std = 0.02 / (2 * 8) ** 0.5
    assert block.attn.proj.weight.std().item() == pytest.approx(resid_std, rel=0.03)
    assert block.mlp.proj.weight.std().item() == pytest.approx(resid_std, rel=0.03)
    assert model.tok_emb.weight.std().item() == pytest.approx(0.02, rel=0.03)
    assert torch.all(block.attn.qkv.bias == 0) and torch.all(block.attn_norm.weight == 1)
    assert model.lm_head.weight is model.tok_emb.weight


def test_dropout_only_in_train_mode():
    torch.manual_seed(0)
    model = build_model(tiny(dropout=0.3))
    idx = torch.randint(0, 61, (2, 16))
    model.eval()
    assert torch.equal(model(idx)[0], model(idx)[0])
    model.train()
    assert not torch.equal(model(idx)[0], model(idx)[0])


def test_registries_cover_exactly_the_config_choices():
    hints = typing.get_type_hints(ModelConfig)
    for field, registry in [
        ("norm", NORMS),
        ("mlp", MLPS),
        ("pos_encoding", POSITIONS),
        ("norm_position", BLOCKS),
    ]:
        assert set(typing.get_args(hints[field])) == set(registry), field


@pytest.mark.parametrize("bias", [True, False])
def test_swiglu_default_width_matches_gelu_params_within_1pct(bias):
    for d_model in list(range(16, 256, 4)) + list(range(256, 4097, 64)):
        gelu = count_params(ModelConfig(d_model=d_model, n_heads=1, mlp="gelu", bias=bias)).mlp
        swiglu = count_params(ModelConfig(d_model=d_model, n_heads=1, mlp="swiglu", bias=bias)).mlp
        assert abs(swiglu / gelu - 1) < 0.01, (d_model, default_d_ff(d_model, "swiglu", bias))
        if d_model >= 192:
            assert default_d_ff(d_model, "swiglu", bias) % 8 == 0


def test_arch_signature():
    assert tiny().arch == "pre-layernorm-learned-mha-gelu"
    cfg = tiny(norm="rmsnorm", pos_encoding="rope", n_kv_heads=2, mlp="swiglu")
    assert cfg.arch == "pre-rmsnorm-rope-gqa2-swiglu"
    assert tiny(n_kv_heads=1, norm_position="post").arch == "post-layernorm-learned-mqa-gelu"
    assert tiny(n_kv_heads=4).arch == tiny().arch  # n_kv_heads == n_heads is MHA


def test_from_dict_round_trip_and_integral_floats():
    cfg = tiny(n_kv_heads=2, mlp="swiglu")
    assert ModelConfig.from_dict(cfg.to_dict()) == cfg
    assert ModelConfig.from_dict({**cfg.to_dict(), "d_model": 64.0}).d_model == 64


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"norm": "batchnorm"}, "norm"),
        ({"norm_position": "sandwich"}, "norm_position"),
        ({"pos_encoding": "xpos"}, "pos_encoding"),
        ({"mlp": "relu"}, "mlp"),
        ({"n_kv_heads": 3}, "n_kv_heads"),
        ({"d_model": 30}, "n_heads"),
        ({"d_model": 36, "n_heads": 4, "pos_encoding": "rope"}, "head_dim"),
        ({"n_layers": 0}, "n_layers"),
        ({"d_model": -8}, "d_model"),
        ({"vocab_size": 0}, "vocab_size"),
        ({"max_seq_len": 0}, "max_seq_len"),
        ({"n_heads": 0}, "n_heads"),
        ({"n_kv_heads": 0}, "n_kv_heads"),
        ({"d_ff": 0}, "d_ff"),
        ({"n_layers": 2.5}, "n_layers"),
        ({"dropout": 1.0}, "dropout"),
        ({"bias": "yes"}, "bias"),
        ({"rope_base": 0}, "rope_base"),
    ],
)
def test_bad_config_raises_one_line_naming_the_field(overrides, field):
    with pytest.raises(ValueError) as err:
        tiny(**overrides)
    message = str(err.value)
    assert field in message and "\n" not in message


def test_bad_option_lists_allowed_values():
    with pytest.raises(ValueError, match="norm must be one of 'layernorm', 'rmsnorm'; got 'bn'"):
        tiny(norm="bn")
    with pytest.raises(ValueError, match="allowed n_kv_heads: 1, 2, 4"):
        tiny(n_kv_heads=3)


def test_from_dict_rejects_unknown_key():
    with pytest.raises(ValueError, match="unknown model config key 'n_layer'"):
        ModelConfig.from_dict({**TINY, "n_layer": 3})


@pytest.mark.parametrize("pos", ["learned", "sinusoidal"])
def test_sequence_longer_than_max_seq_len_rejected_for_absolute_positions(pos):
    model = build_model(tiny(pos_encoding=pos))
    with pytest.raises(ValueError, match=f"exceeds max_seq_len \\(16\\) with pos_encoding='{pos}'"):
        model(torch.zeros(1, 17, dtype=torch.long))


@pytest.mark.parametrize("pos", ["rope", "alibi", "none"])
def test_relative_positions_run_past_max_seq_len(pos):
    torch.manual_seed(0)
    model = build_model(tiny(pos_encoding=pos)).eval()
    idx = torch.randint(0, 61, (1, 40))
    logits, _ = model(idx)
    assert logits.shape == (1, 40, 61)
    # the grown tables give the same prefix as a short sequence
    torch.testing.assert_close(logits[:, :16], model(idx[:, :16])[0], rtol=1e-5, atol=1e-5)


def test_config_is_frozen_and_replace_revalidates():
    cfg = tiny()
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.d_model = 64  # type: ignore[misc]
    with pytest.raises(ValueError, match="n_heads"):
        dataclasses.replace(cfg, d_model=30)
