"""CompleteP (``model.parametrization: completep``, Dey et al. 2025): the coordinate check over
depth, exact equality with muP at the base depth, the branch multiplier, init, the AdamW groups
of table 1, the config checks, run keys, and the depth-transfer benchmark's summary."""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest
import torch

from models import ModelConfig, build_model, count_params
from training.step import adamw, param_groups, set_lr

ROOT = Path(__file__).resolve().parents[1]
LLAMA = dict(norm="rmsnorm", pos_encoding="rope", mlp="swiglu", bias=False, tie_embeddings=False)
DEPTHS = (2, 4, 8, 16, 32)


def config(n_layers: int, parametrization: str = "completep", width: int = 32, **kw) -> ModelConfig:
    base = {
        "sp": {},
        "mup": dict(parametrization="mup", mup_base_width=32),
        "completep": dict(parametrization="completep", mup_base_width=32, mup_base_depth=2),
    }[parametrization]
    shape = dict(
        vocab_size=64, max_seq_len=16, n_layers=n_layers, d_model=width, n_heads=width // 8
    )
    return ModelConfig(**{**shape, **LLAMA, **base, **kw})


@pytest.fixture(autouse=True)
def one_thread():
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


def batch() -> tuple[torch.Tensor, torch.Tensor]:
    tokens = torch.randint(0, 64, (4, 17), generator=torch.Generator().manual_seed(1))
    return tokens[:, :-1], tokens[:, 1:]  # (4, 16) each


def train_steps(cfg: ModelConfig, steps: int = 5, lr: float = 1e-2, wd: float = 0.0):
    """(model, losses) after `steps` AdamW steps on one fixed batch through the training code's
    optimizer groups."""
    torch.manual_seed(0)
    model = build_model(cfg)
    opt = adamw(param_groups(model, wd), lr=lr, betas=(0.9, 0.95), eps=1e-8)
    x, y = batch()
    losses = []
    for _ in range(steps):
        loss = model(x, y)[1]
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return model, losses


def depth_coordinates(cfg: ModelConfig) -> dict[str, float]:
    """After 5 steps: mean |h| of the residual stream the last block hands to the final norm
    (Dey et al. 2025, fig. 7), and the sum over layers of each block's update to the stream,
    mean |block output - block input|."""
    model, _ = train_steps(cfg)
    updates, out = [], {}
    hooks = [
        b.register_forward_hook(lambda m, i, o: updates.append((o - i[0]).abs().mean().item()))
        for b in model.blocks
    ]
    hooks.append(
        model.final_norm.register_forward_hook(
            lambda m, i, o: out.__setitem__("residual", i[0].abs().mean().item())
        )
    )
    with torch.no_grad():
        model(batch()[0])
    for h in hooks:
        h.remove()
    return {**out, "sum_of_updates": sum(updates)}


def test_depth_coordinate_check_completep_flat_sp_and_mup_grow():
    """Over 2-32 layers (16x) at one width: under CompleteP (alpha 1 and 0.5) the final residual
    stream and the summed per-layer updates stay within 2x; under SP and muP both grow by more
    than 5x (measured at lr 1e-2: SP 22x / 69x, muP 30x / 64x; CompleteP within 1.17x / 1.15x,
    alpha 0.5 within 1.07x / 1.31x)."""
    for kind, kw in [("completep", {}), ("completep", {"depth_alpha": 0.5})]:
        coords = [depth_coordinates(config(L, kind, **kw)) for L in DEPTHS]
        for name in coords[0]:
            values = [c[name] for c in coords]
            assert max(values) / min(values) < 2.0, (kind, kw, name, values)
    for kind in ("sp", "mup"):
        shallow, deep = depth_coordinates(config(2, kind)), depth_coordinates(config(32, kind))
        for name in shallow:
            assert deep[name] / shallow[name] > 5.0, (kind, name, shallow, deep)


def block_scales(model) -> list[float]:
    """Mean |x| of each block's output on the fixed batch."""
    out: list[float] = []
    hooks = [
        b.register_forward_hook(lambda m, i, o: out.append(o.abs().mean().item()))
        for b in model.blocks
    ]
    with torch.no_grad():
        model(batch()[0])
    for h in hooks:
        h.remove()
    return out


def test_width_coordinate_check_holds_at_a_non_base_depth():
    """muP's width rules survive the depth rules: at 4 layers (m_L = 2) every block's output
    scale after 5 steps stays within 2x across widths 32-256."""
    scales = [block_scales(train_steps(config(4, width=w))[0]) for w in (32, 64, 128, 256)]
    for layer in range(4):
        values = [s[layer] for s in scales]
        assert max(values) / min(values) < 2.0, (layer, values)


def test_base_depth_is_exactly_mup():
    """At n_layers = mup_base_depth CompleteP is muP: the same init, the same per-parameter
    lr / weight decay / epsilon, and bit-identical losses and weights after 5 AdamW steps."""
    cp_cfg, mup_cfg = config(3, mup_base_depth=3, width=64), config(3, "mup", width=64)
    cp, cp_losses = train_steps(cp_cfg, wd=0.1)
    mup, mup_losses = train_steps(mup_cfg, wd=0.1)
    assert cp_losses == mup_losses
    for (name, a), b in zip(cp.named_parameters(), mup.parameters()):
        assert torch.equal(a, b), name

    def per_param(model):
        opt = adamw(param_groups(model, 0.1), lr=1e-3, eps=1e-8)
        names = {id(p): n for n, p in model.named_parameters()}
        return {
            names[id(p)]: (g["lr"], g["weight_decay"], g["eps"])
            for g in opt.param_groups
            for p in g["params"]
        }

    assert per_param(build_model(cp_cfg)) == per_param(build_model(mup_cfg))


@pytest.mark.parametrize("alpha", [1.0, 0.5])
def test_branch_multiplier_in_the_forward(alpha):
    """A Pre-LN block computes x + m_L^-alpha attn(LN(x)), then + m_L^-alpha mlp(LN(.)),
    checked against the sublayers called by hand (8 layers over base 2: m_L = 4)."""
    cfg = config(8, depth_alpha=alpha)
    assert cfg.depth_mult == 4.0 and cfg.branch_mult == pytest.approx(4.0**-alpha)
    model = build_model(cfg)
    block = model.blocks[3]
    x = torch.randn(2, 16, 32, generator=torch.Generator().manual_seed(0))
    pos = model.pos.attention_inputs(16, 0, x.device)
    m = 4.0**-alpha
    h = x + m * block.attn(block.attn_norm(x), pos)
    expected = h + m * block.mlp(block.mlp_norm(h))
    torch.testing.assert_close(block(x, pos), expected, rtol=1e-6, atol=1e-7)
    assert build_model(config(8, "mup")).blocks[0].branch_mult == 1.0  # muP: no multiplier


def test_init_is_depth_independent():
    """Hidden init as muP's at the base depth, whatever the depth: residual projections keep
    the base model's init_std / sqrt(2 L0) / sqrt(m_N) instead of shrinking as 1/sqrt(2 L)."""
    std = lambda t: t.float().std().item()  # noqa: E731
    for L in (2, 16):
        torch.manual_seed(0)
        model = build_model(config(L, width=128))  # m_N = 4
        assert std(model.blocks[0].attn.qkv.weight) == pytest.approx(0.02 / 2, rel=0.03)
        for block in model.blocks[:2]:
            for proj in block.residual_projections():
                assert std(proj.weight) == pytest.approx(0.02 / 2 / 2, rel=0.03)
        assert model.lm_head.weight.abs().max().item() == 0.0
    torch.manual_seed(0)
    mup_deep = build_model(config(16, "mup", width=128))  # muP keeps GPT-2's 1/sqrt(2 L)
    assert std(mup_deep.blocks[0].mlp.proj.weight) == pytest.approx(0.02 / 2 / 32**0.5, rel=0.03)


@pytest.mark.parametrize("alpha", [1.0, 0.5])
def test_param_groups_follow_table_1(alpha):
    """m_N = 4, m_L = 4: hidden matrices lr x m_N^-1 m_L^(alpha-1), wd x m_N, eps x m_L^-alpha;
    the blocks' norm gains lr x m_L^(alpha-1), eps x m_L^-alpha, no decay; embeddings, head
    and final norm at the base lr and eps. The groups partition the parameters."""
    model = build_model(config(8, width=128, depth_alpha=alpha))
    opt = adamw(param_groups(model, 0.1), lr=1.0, eps=1e-8)
    ids = [id(p) for g in opt.param_groups for p in g["params"]]
    assert sorted(ids) == sorted(id(p) for p in model.parameters())  # each exactly once
    names = {id(p): n for n, p in model.named_parameters()}
    rule = {
        names[id(p)]: (g["lr"], g["weight_decay"], g["eps"])
        for g in opt.param_groups
        for p in g["params"]
    }
    depth_lr, eps = 4.0 ** (alpha - 1), 1e-8 * 4.0**-alpha
    for name in (
        "blocks.0.attn.qkv.weight",
        "blocks.7.attn.proj.weight",
        "blocks.3.mlp.gate_up.weight",
    ):
        assert rule[name] == pytest.approx((depth_lr / 4, 0.4, eps)), name
    for name in ("blocks.0.attn_norm.weight", "blocks.5.mlp_norm.weight"):
        assert rule[name] == pytest.approx((depth_lr, 0.0, eps)), name
    assert rule["tok_emb.weight"] == rule["lm_head.weight"] == pytest.approx((1.0, 0.1, 1e-8))
    assert rule["final_norm.weight"] == pytest.approx((1.0, 0.0, 1e-8))


def test_first_adam_step_sizes():
    """Adam's first update is ~lr per entry: through `set_lr` (as the training loop), the largest
    change of a hidden matrix is lr / m_N x m_L^(alpha-1), of a block gain lr x m_L^(alpha-1),
    of the embedding lr (alpha 0.5, m_N = 4, m_L = 4)."""
    model = build_model(config(8, width=128, depth_alpha=0.5))
    torch.nn.init.normal_(model.lm_head.weight, std=0.02)  # a zero readout stops every gradient
    opt = adamw(param_groups(model, 0.0), lr=1.0, eps=1e-14)
    set_lr(opt, 3e-3)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    x, y = batch()
    model(x, y)[1].backward()
    opt.step()
    step = {n: (p.detach() - before[n]).abs().max().item() for n, p in model.named_parameters()}
    assert step["blocks.0.attn.qkv.weight"] == pytest.approx(3e-3 / 4 / 2, rel=1e-3)
    assert step["blocks.7.mlp.proj.weight"] == pytest.approx(3e-3 / 4 / 2, rel=1e-3)
    assert step["blocks.2.attn_norm.weight"] == pytest.approx(3e-3 / 2, rel=1e-3)
    assert step["tok_emb.weight"] == pytest.approx(3e-3, rel=1e-3)
    assert step["final_norm.weight"] == pytest.approx(3e-3, rel=1e-3)


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"parametrization": "completep", "mup_base_width": 32}, "mup_base_depth must be set"),
        ({"parametrization": "completep", "mup_base_depth": 2}, "mup_base_width must be set"),
        (
            {"parametrization": "completep", "mup_base_width": 32, "mup_base_depth": 0},
            "mup_base_depth must be a positive integer or null, got 0",
        ),
        (
            {"parametrization": "completep", "mup_base_width": 32, "mup_base_depth": -2},
            "mup_base_depth must be a positive integer or null, got -2",
        ),
        (
            {
                "parametrization": "completep",
                "mup_base_width": 32,
                "mup_base_depth": 2,
                "depth_alpha": 0.25,
            },
            r"depth_alpha must be in \[0.5, 1\], got 0.25",
        ),
        (
            {
                "parametrization": "completep",
                "mup_base_width": 32,
                "mup_base_depth": 2,
                "depth_alpha": "a",
            },
            r"depth_alpha must be a number in \[0.5, 1\], got 'a'",
        ),
        (
            {"parametrization": "mup", "mup_base_width": 32, "mup_base_depth": 2},
            "mup_base_depth applies to parametrization='completep' only",
        ),
        ({"depth_alpha": 0.5}, "depth_alpha applies to parametrization='completep' only"),
        ({"mup_base_width": 32}, "mup_base_width applies to parametrization='mup' or 'completep'"),
        (
            {
                "parametrization": "completep",
                "mup_base_width": 32,
                "mup_base_depth": 2,
                "norm_position": "post",
            },
            "parametrization='completep' needs norm_position='pre'",
        ),
        (
            {
                "parametrization": "completep",
                "mup_base_width": 32,
                "mup_base_depth": 2,
                "family": "encoder",
            },
            "parametrization='completep' is implemented for family='decoder' only",
        ),
    ],
)
def test_bad_completep_config(fields, message):
    with pytest.raises(ValueError, match=message) as err:
        ModelConfig.from_dict({"d_model": 64, "n_heads": 2, **fields})
    assert "\n" not in str(err.value)


def test_dicts_and_run_keys(tmp_path):
    """SP and muP dicts (run keys, MLflow params) leave the depth fields out; a CompleteP dict
    holds them and round-trips; alpha 1 and 1.0 are one key; base depth and alpha change it."""
    from training.spec import resolve_config

    assert not {"mup_base_depth", "depth_alpha"} & set(config(4, "mup").to_dict())
    assert not {"mup_base_depth", "depth_alpha"} & set(config(4, "sp").to_dict())
    cp = config(4)
    assert cp.to_dict()["mup_base_depth"] == 2 and cp.to_dict()["depth_alpha"] == 1.0
    assert ModelConfig.from_dict(cp.to_dict()) == cp
    assert count_params(cp) == count_params(config(4, "sp"))

    def key(**model):
        cfg = {
            "model": {"d_model": 32, "n_heads": 2, "mup_base_width": 32, **model},
            "data": {"tokenizer": "byte"},
            "paths": {"runs_dir": str(tmp_path)},
        }
        return resolve_config(cfg).run_key

    base = key(parametrization="completep", mup_base_depth=2)
    assert key(parametrization="completep", mup_base_depth=2, depth_alpha=1) == base
    others = {
        key(parametrization="mup"),
        key(parametrization="completep", mup_base_depth=1),
        key(parametrization="completep", mup_base_depth=2, depth_alpha=0.5),
    }
    assert len(others | {base}) == 4


def test_depth_transfer_summary():
    """benchmarks.depth_transfer.summarise: each depth's optimum (parabola vertex), the spread
    max/min across depths and its log2, the regret of the base depth's best grid lr, seed
    means; seed_noise: the |loss difference| between two seeds of a point."""
    from benchmarks.depth_transfer import seed_noise, summarise

    lrs = [1e-3 * 2**k for k in range(6)]
    best = {2: 0.0123, 8: 0.0123 / 4}
    rows = [
        {
            "parametrization": "sp",
            "n_layers": L,
            "train.lr": lr,
            "loss": 2.0 + 0.1 * (math.log2(lr) - math.log2(best[L])) ** 2,
        }
        for L in best
        for lr in lrs
    ]
    s = summarise(rows)["sp"]
    assert s["depths"][2]["best_lr_refined"] == pytest.approx(0.0123, rel=1e-9)
    assert s["spread_refined"] == pytest.approx(4.0, rel=1e-9)
    assert s["log2_spread_refined"] == pytest.approx(2.0, rel=1e-9)
    assert s["depths"][2]["regret_of_base_lr"] == 0.0
    assert s["depths"][2]["near_best_lrs"] == [0.016]
    near = summarise(rows, tolerance=0.1)["sp"]["depths"][2]["near_best_lrs"]
    assert near == [0.008, 0.016]  # 0.1 log2(lr / 0.0123)^2 within 0.1 of the best grid point's
    # At 8 layers the base depth's best grid lr (0.016) sits log2(0.016 / 0.003075) from the
    # optimum: regret 0.1 x that squared minus the best grid point's own.
    at8 = s["depths"][8]
    expected = 0.1 * math.log2(0.016 / best[8]) ** 2 - (at8["best_loss"] - 2.0)
    assert at8["regret_of_base_lr"] == pytest.approx(expected, rel=1e-9)
    # A second seed at 2 layers, 0.02 and 0.04 above the first: the optimum goes through the
    # seed means (unchanged by a shift), the noise is the |difference| between the two seeds.
    again = [
        {**r, "train.seed": 1, "loss": r["loss"] + (0.02 if r["train.lr"] < 0.01 else 0.04)}
        for r in rows
        if r["n_layers"] == 2
    ]
    both = summarise(rows + again)["sp"]["depths"][2]
    assert both["seeds"] == 2 and both["best_lr_grid"] == s["depths"][2]["best_lr_grid"]
    assert both["best_loss"] == pytest.approx(s["depths"][2]["best_loss"] + 0.02)
    noise = seed_noise(rows + again)
    assert noise["pairs"] == 6 and noise["max_abs_diff"] == pytest.approx(0.04)
    assert noise["median_abs_diff"] == pytest.approx(0.02)  # 4 lrs below 0.01, 2 above


def compose(overrides: list[str]):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(str(ROOT / "conf"), version_base="1.3"):
        return hydra_compose("config", overrides=overrides)


@pytest.fixture
def lab(tmp_path) -> list[str]:
    """A tiny run (8 steps of 256 bytes, 2 layers of d_model 32) writing inside tmp_path/out."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    text = (Path(os.__file__).parent / "argparse.py").read_text(encoding="utf-8")
    (corpus / "doc.txt").write_text(text, encoding="utf-8")
    out = tmp_path / "out"
    return [
        f"tracking.uri=sqlite:///{out / 'mlruns.db'}",
        f"paths.runs_dir={out / 'runs'}",
        f"paths.cache_dir={out / 'cache'}",
        f"data.path={corpus}",
        "data.source=text",
        "data.tokenizer=byte",
        "data.eval_tokens=256",
        "model.d_model=32",
        "model.n_heads=4",
        "model.n_kv_heads=null",
        "train.seq_len=32",
        "train.batch_tokens=256",
        "train.tokens=2048",
        "train.warmup=2",
        "train.progress=none",
    ]


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["model.mup_base_depth=0"], "model: mup_base_depth must be a positive integer or null"),
        (["model.mup_base_depth=null"], "model: mup_base_depth must be set with"),
        (["model.depth_alpha=2"], "model: depth_alpha must be in [0.5, 1], got 2.0"),
        (["model=vanilla"], "model: parametrization='completep' needs norm_position='pre'"),
    ],
)
def test_train_refuses_a_bad_completep_config_in_one_line(lab, capsys, overrides, message):
    """Through the training entry point: exit 2, one `error:` line, nothing written."""
    from training.train import _main

    good = ["model.parametrization=completep", "model.mup_base_width=32", "model.mup_base_depth=2"]
    cfg = compose([*lab, *good, *overrides])
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        _main(cfg)
    assert exit_.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {message}"), lines
    assert not (Path(lab[1].split("=", 1)[1]).parent).exists()  # tmp_path/out


@pytest.mark.slow  # 15-29 s at load 11-15 on 2 cores (7 s of CPU)
def test_a_completep_run_trains_and_records_its_base_depth(lab):
    """A 4-layer CompleteP run over base depth 2 trains to a finite loss and logs its
    parametrization, base width, base depth and alpha as MLflow params."""
    from mlflow import MlflowClient

    from training.train import train

    cfg = compose(
        [
            *lab,
            "model.n_layers=4",
            "model.parametrization=completep",
            "model.mup_base_width=32",
            "model.mup_base_depth=2",
        ]
    )
    result = train(cfg)
    assert result.status == "FINISHED", result.failure_reason
    assert math.isfinite(result.final_val_loss)
    params = MlflowClient(lab[0].split("=", 1)[1]).get_run(result.run_id).data.params
    assert params["model.parametrization"] == "completep"
    assert (params["model.mup_base_width"], params["model.mup_base_depth"]) == ("32", "2")
    assert params["model.depth_alpha"] == "1.0"


def test_the_optimizer_uses_each_groups_epsilon():
    """AdamW's first step is lr g / (|g| + eps) per entry: with eps = 1e-3, comparable to the
    gradients, the step of every parameter matches that formula with its group's lr and
    epsilon (eps x m_L^-alpha inside the blocks, m_L = 4, alpha 1), not the base epsilon."""
    model = build_model(config(8, width=64))
    torch.nn.init.normal_(model.lm_head.weight, std=0.02)  # a zero readout stops every gradient
    opt = adamw(param_groups(model, 0.0), lr=1e-2, eps=1e-3)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    x, y = batch()
    model(x, y)[1].backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
    opt.step()
    names = {id(p): n for n, p in model.named_parameters()}
    eps_of = {names[id(p)]: g["eps"] for g in opt.param_groups for p in g["params"]}
    lr_of = {names[id(p)]: g["lr"] for g in opt.param_groups for p in g["params"]}
    assert eps_of["blocks.0.attn.qkv.weight"] == pytest.approx(1e-3 / 4)
    assert eps_of["tok_emb.weight"] == pytest.approx(1e-3)
    for name in ("blocks.0.attn.qkv.weight", "blocks.4.attn_norm.weight", "tok_emb.weight"):
        g = grads[name]
        expected = -lr_of[name] * g / (g.abs() + eps_of[name])
        step = model.get_parameter(name).detach() - before[name]
        ulp = torch.finfo(torch.float32).eps * before[name].abs().max().item()
        torch.testing.assert_close(step, expected, rtol=1e-4, atol=4 * ulp)  # step = new - old


def test_depth_transfer_budget_in_key_and_table(tmp_path):
    """benchmarks.depth_transfer: --tokens reaches train.tokens (so the run key) of every
    point, and runs.csv holds one budget: merging rows at another budget is refused."""
    import pandas as pd

    from benchmarks.depth_transfer import all_points, merge_runs, point_overrides
    from training.spec import resolve_config

    points = all_points(depths=(2,), tokens=2e5, lrs=(1e-3, 2e-3))
    assert {pt[4] for pt in points} == {2e5} and len(points) == 3 * 2
    over = point_overrides("completep", 4, 1e-3, tokens=2e5)
    assert "train.tokens=200000" in over and "model.mup_base_depth=2" in over
    runs = [f"paths.runs_dir={tmp_path}"]
    keys = {
        resolve_config(compose(point_overrides("sp", 2, 1e-3, tokens=t) + runs)).run_key
        for t in (1e5, 2e5)
    }
    assert len(keys) == 2

    def table(tokens: float, key: str) -> pd.DataFrame:
        row = {"parametrization": "sp", "n_layers": 2, "train.lr": 1e-3, "train.seed": 0}
        return pd.DataFrame([{**row, "train.tokens": tokens, "run_key": key, "loss": 2.0}])

    merged = merge_runs(table(2e5, "a"), table(2e5, "b"))
    assert sorted(merged["run_key"]) == ["a", "b"]
    with pytest.raises(SystemExit, match="train.tokens"):
        merge_runs(table(1e5, "a"), table(2e5, "b"))
    with pytest.raises(SystemExit, match="train.tokens"):  # a table from before the column
        merge_runs(table(1e5, "a").drop(columns="train.tokens"), table(2e5, "b"))
