"""muP (``model.parametrization: mup``, Yang et al. 2022): the coordinate check, the per-layer
Adam groups, the attention scale, init, and that SP is what it was before muP existed."""

from __future__ import annotations

import math

import pytest
import torch

from models import ModelConfig, build_model, count_params, flops_per_token
from training.step import adamw, param_groups, set_lr

LLAMA = dict(norm="rmsnorm", pos_encoding="rope", mlp="swiglu", bias=False, tie_embeddings=False)
WIDTHS = (32, 64, 128, 256, 512)


def config(width: int, parametrization: str = "sp", base: int = 32, **kw) -> ModelConfig:
    mup = dict(parametrization="mup", mup_base_width=base) if parametrization == "mup" else {}
    shape = dict(vocab_size=64, max_seq_len=16, n_layers=2, d_model=width, n_heads=width // 8)
    return ModelConfig(**{**shape, **LLAMA, **mup, **kw})


@pytest.fixture(autouse=True)
def one_thread():
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


def coordinates(parametrization: str, width: int, steps: int = 5, lr: float = 1e-2) -> dict:
    """Mean |x| of each block's output and of the logits after `steps` Adam steps on one fixed
    batch (the same tokens at every width), through the training code's optimizer groups."""
    torch.manual_seed(0)
    model = build_model(config(width, parametrization))
    opt = adamw(param_groups(model, 0.0), lr=lr, betas=(0.9, 0.95))
    tokens = torch.randint(0, 64, (4, 17), generator=torch.Generator().manual_seed(1))
    x, y = tokens[:, :-1], tokens[:, 1:]  # (4, 16) each
    for _ in range(steps):
        model(x, y)[1].backward()
        opt.step()
        opt.zero_grad()
    out: dict[str, float] = {}
    hooks = [
        block.register_forward_hook(
            lambda m, i, o, k=k: out.__setitem__(f"block{k}", o.abs().mean().item())
        )
        for k, block in enumerate(model.blocks)
    ]
    with torch.no_grad():
        out["logits"] = model(x)[0].abs().mean().item()
    for h in hooks:
        h.remove()
    return out


def test_coordinate_check_mup_stable_sp_grows():
    """Under muP every activation scale after training stays within 2x across widths 32-512
    (16x); under SP the block outputs grow by more than 10x and the logits by more than 4x
    (measured: SP blocks ~1000x, logits ~9x; muP within 1.3x and 1.6x)."""
    sp = {w: coordinates("sp", w) for w in WIDTHS}
    mup = {w: coordinates("mup", w) for w in WIDTHS}
    for name in sp[32]:
        values = [mup[w][name] for w in WIDTHS]
        assert max(values) / min(values) < 2.0, (name, values)
    for name in ("block0", "block1"):
        assert sp[512][name] / sp[32][name] > 10.0, (name, sp)
    assert sp[512]["logits"] / sp[32]["logits"] > 4.0, sp


def test_param_groups_scale_hidden_lr_and_decay():
    """Hidden matrices (every Linear in the blocks) get lr / width_mult and wd x width_mult;
    embeddings, head and gains keep the base lr; the groups partition the parameters."""
    model = build_model(config(128, "mup", base=32))  # width_mult 4
    groups = param_groups(model, 0.1)
    ids = [id(p) for g in groups for p in g["params"]]
    assert sorted(ids) == sorted(id(p) for p in model.parameters())  # each exactly once
    hidden = {id(p) for p in model.hidden_weights()}
    names = {id(p): n for n, p in model.named_parameters()}
    assert {names[i].rsplit(".", 2)[-2] for i in hidden} == {"qkv", "proj", "gate_up"}
    by_scale = {g["lr_scale"]: g for g in groups if g["params"]}
    assert {id(p) for p in by_scale[0.25]["params"]} == hidden
    assert by_scale[0.25]["weight_decay"] == pytest.approx(0.4)
    base = {names[id(p)] for g in groups if g["lr_scale"] == 1.0 for p in g["params"]}
    assert {"tok_emb.weight", "lm_head.weight", "final_norm.weight"} <= base
    # SP: the two groups of before, whatever the width.
    sp = param_groups(build_model(config(128)), 0.1)
    assert [(g["weight_decay"], g["lr_scale"]) for g in sp] == [(0.1, 1.0), (0.0, 1.0)]


def test_first_adam_step_moves_hidden_weights_by_lr_over_width_mult():
    """Adam's first update is lr * g / (|g| + eps) ~ lr per entry: the largest change of a hidden
    matrix is lr / width_mult, of the embedding lr (through `set_lr`, as the training loop)."""
    model = build_model(config(128, "mup", base=32))
    torch.nn.init.normal_(model.lm_head.weight, std=0.02)  # a zero readout stops every gradient
    opt = adamw(param_groups(model, 0.0), lr=1.0, eps=1e-12)
    set_lr(opt, 3e-3)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    x = torch.randint(0, 64, (2, 16), generator=torch.Generator().manual_seed(0))
    model(x, x)[1].backward()
    opt.step()
    step = {n: (p.detach() - before[n]).abs().max().item() for n, p in model.named_parameters()}
    assert step["blocks.0.attn.qkv.weight"] == pytest.approx(3e-3 / 4, rel=1e-3)
    assert step["blocks.1.mlp.proj.weight"] == pytest.approx(3e-3 / 4, rel=1e-3)
    assert step["tok_emb.weight"] == pytest.approx(3e-3, rel=1e-3)
    assert step["lm_head.weight"] == pytest.approx(3e-3, rel=1e-3)


@pytest.mark.parametrize("parametrization, scale", [("sp", "sqrt"), ("mup", "linear")])
def test_attention_scale(parametrization, scale):
    """softmax(q k^T * s) v with s = 1/sqrt(head_dim) under SP and 1/head_dim under muP, checked
    against an explicit implementation of the attention from the fused qkv weights."""
    cfg = config(64, parametrization, base=32, pos_encoding="none", n_heads=2)  # head_dim 32
    attn = build_model(cfg).blocks[0].attn
    torch.nn.init.normal_(attn.qkv.weight, std=0.3)  # large logits: the scale matters
    x = torch.randn(2, 8, 64, generator=torch.Generator().manual_seed(0))
    from models.registry import POSITIONS

    pos = POSITIONS["none"](cfg).attention_inputs(8, 0, x.device)
    q, k, v = attn.qkv(x).split(64, dim=-1)
    q, k, v = (t.view(2, 8, 2, 32).transpose(1, 2) for t in (q, k, v))  # (B, H, T, hd)
    s = 1 / math.sqrt(32) if scale == "sqrt" else 1 / 32
    logits = (q @ k.transpose(-1, -2)) * s  # (B, H, T, T)
    logits = logits.masked_fill(torch.ones(8, 8, dtype=torch.bool).triu(1), float("-inf"))
    y = (logits.softmax(-1) @ v).transpose(1, 2).reshape(2, 8, 64)
    torch.testing.assert_close(attn(x, pos), attn.proj(y), rtol=1e-5, atol=1e-6)


def test_init_rules():
    """SP: N(0, init_std), residual projections / sqrt(2 L). muP: hidden matrices / sqrt(m),
    embeddings unchanged, untied readout zero; at the base width muP's hidden init is SP's."""
    torch.manual_seed(0)
    sp = build_model(config(512))
    torch.manual_seed(0)
    mup = build_model(config(512, "mup", base=32))  # m = 16
    std = lambda t: t.float().std().item()  # noqa: E731
    assert std(sp.blocks[0].attn.qkv.weight) == pytest.approx(0.02, rel=0.02)
    assert std(sp.blocks[0].attn.proj.weight) == pytest.approx(0.02 / 2, rel=0.02)
    assert std(mup.blocks[0].attn.qkv.weight) == pytest.approx(0.02 / 4, rel=0.02)
    assert std(mup.blocks[1].mlp.proj.weight) == pytest.approx(0.02 / 2 / 4, rel=0.02)
    assert std(mup.tok_emb.weight) == pytest.approx(0.02, rel=0.02)
    assert mup.lm_head.weight.abs().max().item() == 0.0
    assert mup.readout_mult == 1 / 16
    torch.manual_seed(0)
    at_base = build_model(config(32, "mup", base=32))
    torch.manual_seed(0)
    sp_base = build_model(config(32))
    torch.testing.assert_close(
        at_base.blocks[0].mlp.gate_up.weight, sp_base.blocks[0].mlp.gate_up.weight
    )


def test_sp_config_unchanged_and_counts_equal():
    """An SP config's dict has exactly the fields it had before muP (so its run key and MLflow
    params are the same); the muP twin counts the same parameters and FLOPs."""
    before = {
        "vocab_size",
        "max_seq_len",
        "n_layers",
        "d_model",
        "n_heads",
        "n_kv_heads",
        "d_ff",
        "norm_position",
        "norm",
        "pos_encoding",
        "rope_base",
        "mlp",
        "tie_embeddings",
        "scale_embeddings",
        "bias",
        "dropout",
        "norm_eps",
        "init_std",
    }
    assert set(config(64).to_dict()) == before
    mup = config(64, "mup", base=16)
    assert mup.to_dict()["mup_base_width"] == 16 and mup.width_mult == 4.0
    assert ModelConfig.from_dict(mup.to_dict()) == mup
    assert count_params(mup) == count_params(config(64))
    assert flops_per_token(mup, 16) == flops_per_token(config(64), 16)


def test_sp_run_key_and_mup_key(tmp_path):
    """Spelling out the SP defaults keeps the run key; muP, or another base width, changes it."""
    from training.spec import resolve_config

    def key(**model):
        cfg = {
            "model": {"d_model": 32, "n_heads": 2, **model},
            "data": {"tokenizer": "byte"},
            "paths": {"runs_dir": str(tmp_path)},
        }
        return resolve_config(cfg).run_key

    plain = key()
    assert key(parametrization="sp", mup_base_width=None) == plain
    mup16, mup32 = (
        key(parametrization="mup", mup_base_width=16),
        key(parametrization="mup", mup_base_width=32),
    )
    assert len({plain, mup16, mup32}) == 3


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"parametrization": "mup"}, "mup_base_width must be set with parametrization='mup'"),
        (
            {"mup_base_width": 32},
            "mup_base_width applies to parametrization='mup' or 'completep' only",
        ),
        ({"parametrization": "mu"}, "parametrization must be one of 'sp', 'mup'"),
        (
            {"parametrization": "mup", "mup_base_width": 0},
            "mup_base_width must be a positive integer",
        ),
        (
            {"parametrization": "mup", "mup_base_width": 32, "family": "encoder"},
            "parametrization='mup' is implemented for family='decoder' only",
        ),
    ],
)
def test_bad_mup_config(fields, message):
    with pytest.raises(ValueError, match=message):
        ModelConfig.from_dict({"d_model": 64, "n_heads": 2, **fields})


def test_export_refuses_mup():
    """An HF model has no output multiplier or 1/head_dim attention: one line, not wrong logits."""
    from models import ExportError
    from models.export_hf import hf_target

    assert hf_target(config(64)) == "llama"
    with pytest.raises(ExportError, match="parametrization='mup' has no Hugging Face equivalent"):
        hf_target(config(64, "mup"))


def test_mup_transfer_optimum_is_the_parabola_vertex():
    """benchmarks.mup_transfer's refined optimum: the vertex in log2(lr) of a parabola through
    the best grid point and its neighbours (exact for a parabola); the grid point at an edge."""
    from benchmarks.mup_transfer import optimum

    lrs = [1e-3 * 2**k for k in range(6)]
    true = 0.0123
    losses = [2.0 + 0.1 * (math.log2(lr) - math.log2(true)) ** 2 for lr in lrs]
    got = optimum(lrs, losses)
    assert got["best_lr_grid"] == pytest.approx(0.016) and not got["at_edge"]
    assert got["best_lr_refined"] == pytest.approx(true, rel=1e-9)
    edge = optimum(lrs, sorted(losses))
    assert edge["at_edge"] and edge["best_lr_refined"] == lrs[0]
    with_nan = optimum(lrs, [float("nan"), *losses[1:]])  # a diverged run is skipped
    assert with_nan["best_lr_refined"] == pytest.approx(true, rel=1e-9)
