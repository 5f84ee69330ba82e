"""Mixture of experts (``mlp: moe``) and QK-norm: exact parameter counts (total and active)
over a grid, FLOPs against FlopCounterMode, dropless routing against a per-token reference
for both kernels, the balance losses reaching the training objective, aux-free balancing, and
one-line errors for bad input."""

from __future__ import annotations

import dataclasses
import itertools
import math

import pytest
import torch
import torch.nn.functional as F
from accelerate import Accelerator
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from models import ModelConfig, build_model, count_params, flops_per_token
from models.moe import MoEMLP, balance, moe_layers, routing_stats
from training.config import TrainConfig
from training.ranks import reset_accelerate_state
from training.step import Update, loss, make_optimizer, optimizer_step, step_and_clip

V = 61
TINY = dict(vocab_size=V, max_seq_len=16, n_layers=2, d_model=32, n_heads=4, d_ff=64)
MOE = dict(mlp="moe", n_experts=4, top_k=2)
GRID = {
    "expert_mlp": ["gelu", "swiglu"],
    "n_shared_experts": [0, 2],
    "moe_granularity": [1, 4],
    "moe_every": [1, 2],
    "top_k": [1, 3],
    "moe_balance": ["aux_loss", "aux_free"],
}
COMBOS = [dict(zip(GRID, values)) for values in itertools.product(*GRID.values())]


def tiny(**overrides) -> ModelConfig:
    return ModelConfig(**{**TINY, **MOE, **overrides})


def moe_of(cfg: ModelConfig) -> MoEMLP:
    layers = moe_layers(build_model(cfg))
    assert layers
    return layers[0]


@pytest.mark.parametrize("axes", COMBOS, ids=lambda a: "-".join(map(str, a.values())))
def test_every_moe_combination_trains_and_counts_total_and_active(axes):
    torch.manual_seed(0)
    i = COMBOS.index(axes)
    cfg = tiny(
        **axes, bias=i % 2 == 0, qk_norm=i % 3 == 0, norm_position=["pre", "post"][i % 4 // 2]
    )
    model = build_model(cfg)
    idx = torch.randint(0, V, (2, 16))
    _, ce = model(idx, idx)
    layers = moe_layers(model)
    assert len(layers) == cfg.n_moe_layers == (2 if cfg.moe_every == 1 else 1)
    (ce + sum(m.aux_loss for m in layers)).backward()
    params = list(model.parameters())
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in params)
    pc = count_params(cfg)
    assert pc.total == sum(p.numel() for p in params)
    assert pc.total == pc.non_embedding + pc.embedding
    # active: every parameter but the routed experts a token does not reach
    unused = sum(
        p.numel() // m.n_experts * (m.n_experts - m.top_k)
        for m in layers
        for p in (m.proj.weight, (m.gate_up if m.swiglu else m.fc).weight)
    )
    assert pc.non_embedding_active == pc.non_embedding - unused
    assert flops_per_token(cfg, 16).six_n == 6 * pc.non_embedding_active


def _grouped_mm_flops(a_shape, b_shape, *args, out_shape=None, **kwargs) -> int:
    """FlopCounterMode has no formula for _grouped_mm: 2 FLOPs per multiply-add over the
    groups, for (M, K) x (E, K, N) and the weight gradient's (K, M) x (M, N) alike."""
    return 2 * math.prod(a_shape) * b_shape[-1]


@pytest.mark.parametrize(
    "overrides",
    [
        dict(),
        dict(expert_mlp="gelu", n_shared_experts=1, moe_granularity=2, qk_norm=True),
        dict(moe_every=2, n_layers=3, top_k=1, moe_balance="aux_free", n_kv_heads=2),
        dict(mlp="swiglu", qk_norm=True, n_experts=8, top_k=2),  # dense + QK-norm
    ],
    ids=["swiglu-experts", "gelu-shared-g2-qknorm", "every2-top1-auxfree", "dense-qknorm"],
)
def test_exact_flops_match_flop_counter(overrides):
    """Dropless routing on the grouped kernel computes each assignment once: the count is the
    active parameters' plus the router's. (The padded kernel also multiplies its padding.)"""
    torch.manual_seed(0)
    cfg = tiny(**{**overrides, "d_model": 64, "d_ff": 128, "vocab_size": 500, "max_seq_len": 24})
    cfg = ModelConfig.from_dict(cfg.to_dict())  # the dense override drops the MoE fields
    model = build_model(cfg)
    for m in moe_layers(model):
        m.kernel = "grouped"
    B, T = 2, 24
    idx = torch.randint(0, 500, (B, T))
    mapping = {torch.ops.aten._grouped_mm: _grouped_mm_flops}
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False, custom_mapping=mapping) as c:
        _, ce = model(idx, idx)
        ce.backward()
    fl = flops_per_token(cfg, T)
    assert fl.exact * B * T == c.get_total_flops()
    parts = [v for k, v in vars(fl).items() if k not in ("six_n", "exact", "forward")]
    assert fl.forward == sum(parts) and fl.exact == 3 * fl.forward


def test_qk_norm_counts_and_forward():
    """QK-norm: 2 head_dim gains per attention, no FLOPs counted, and per-head invariance to
    the scale of the query and key projections."""
    torch.manual_seed(0)
    plain = ModelConfig(**TINY)
    normed = ModelConfig(**TINY, qk_norm=True)
    assert count_params(normed).total - count_params(plain).total == 2 * 2 * plain.head_dim
    assert flops_per_token(normed, 16).exact == flops_per_token(plain, 16).exact
    seq = ModelConfig(**TINY, qk_norm=True, family="encoder_decoder")
    model = build_model(seq)
    assert sum(p.numel() for p in model.parameters()) == count_params(seq).total
    model = build_model(dataclasses.replace(normed, norm_eps=1e-12)).eval()  # eps: not exact
    idx = torch.randint(0, V, (2, 16))
    ref = model(idx)[0]
    with torch.no_grad():
        qk_rows = 2 * normed.d_model  # [q | k] rows of the fused qkv (MHA)
        model.blocks[0].attn.qkv.weight[:qk_rows] *= 7.0
        if model.blocks[0].attn.qkv.bias is not None:
            model.blocks[0].attn.qkv.bias[:qk_rows] *= 7.0
    torch.testing.assert_close(model(idx)[0], ref, rtol=1e-4, atol=1e-5)
    assert normed.arch.endswith("-qknorm") and "qk_norm" not in plain.to_dict()


def _reference(moe: MoEMLP, x: torch.Tensor) -> torch.Tensor:
    """Per token, per chosen expert: the expert as plain matmuls, times its gate weight."""
    x2 = x.reshape(-1, x.shape[-1])
    probs = (x2 @ moe.router.weight.T).float().softmax(-1)
    top = (probs + moe.select_bias if moe.aux_free else probs).topk(moe.top_k, dim=-1)
    first = (moe.gate_up if moe.swiglu else moe.fc).weight
    rows = []
    for n in range(x2.shape[0]):
        gates = probs[n, top.indices[n]]
        if moe.norm_topk:
            gates = gates / gates.sum()
        y = torch.zeros_like(x2[n])
        for e, g in zip(top.indices[n].tolist(), gates):
            h = first[e] @ x2[n]
            if moe.swiglu:
                gate, up = h.chunk(2)
                h = F.silu(gate) * up
            else:
                h = F.gelu(h)
            y = y + g * (moe.proj.weight[e] @ h)
        rows.append(y)
    out = torch.stack(rows)
    if moe.shared is not None:
        out = out + moe.shared(x2)
    return out.view_as(x)


@pytest.mark.parametrize("kernel", ["grouped", "padded"])
@pytest.mark.parametrize(
    "overrides",
    [
        dict(),
        dict(expert_mlp="gelu", n_shared_experts=1, top_k=3, moe_norm_topk=True),
        dict(n_experts=8, top_k=1, moe_granularity=2, moe_balance="aux_free"),
    ],
    ids=["top2", "gelu-shared-top3-norm", "8x1-g2-auxfree"],
)
def test_dropless_routing_equals_per_token_reference(kernel, overrides):
    torch.manual_seed(0)
    moe = moe_of(tiny(**overrides))
    moe.kernel = kernel
    with torch.no_grad():  # skew the load so some experts get many tokens and some none
        moe.router.weight.mul_(20.0)
        moe.select_bias.normal_(0.0, 0.1)
    x = torch.randn(3, 16, 32, requires_grad=True)
    out, ref = moe(x), _reference(moe, x)
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-6)
    g = torch.randn_like(out)
    grads = torch.autograd.grad((out * g).sum(), [x, *moe.parameters()])
    ref_grads = torch.autograd.grad((ref * g).sum(), [x, *moe.parameters()])
    for a, b in zip(grads, ref_grads):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_aux_free_bias_balances_a_skewed_router():
    torch.manual_seed(0)
    moe = moe_of(tiny(n_experts=4, top_k=1, moe_balance="aux_free", moe_bias_rate=0.01))
    with torch.no_grad():
        moe.router.weight.normal_(0.0, 0.1)
        moe.router.weight[0, 0] = 2.0  # with x[:, 0] ~ N(1, 1): expert 0 takes most tokens
    layers = [moe]

    def load_after_step() -> torch.Tensor:
        x = torch.randn(4, 16, 32)
        x[..., 0] += 1.0
        with torch.no_grad():
            moe(x)
        load = moe.load
        balance(layers)  # what Update.apply does after each optimizer step
        return load

    first = load_after_step()
    assert first.max() > 0.6  # skewed
    for _ in range(300):
        last = load_after_step()
    assert last.max() < 0.35 and last.min() > 0.15  # uniform is 0.25
    assert moe.select_bias[0] < moe.select_bias[1:].min()


def test_routing_stats_are_the_loads_since_the_last_read():
    moe = moe_of(tiny(n_experts=4, top_k=2))
    x = torch.randn(2, 8, TINY["d_model"])
    counts = torch.zeros(4)
    for _ in range(3):
        moe(x)
        _, idx, _ = moe.route(x.reshape(-1, TINY["d_model"]))
        counts += torch.bincount(idx.reshape(-1), minlength=4)
    stats = routing_stats([moe])
    shares = counts / counts.sum()
    assert [stats[f"moe0_load_e{j}"] for j in range(4)] == pytest.approx(shares.tolist())
    assert stats["moe0_load_max"] == pytest.approx(4 * float(shares.max()))
    assert stats["moe0_load_min"] == pytest.approx(4 * float(shares.min()))
    probs = moe.router(x.reshape(-1, TINY["d_model"])).float().softmax(-1)
    assert stats["moe0_aux"] == pytest.approx(4 * float((shares * probs.mean(0)).sum()), rel=1e-5)
    assert routing_stats([moe]) == {}  # read resets; eval forwards are not counted
    moe.eval()
    moe(x)
    assert routing_stats([moe]) == {}


def test_aux_and_z_losses_reach_the_objective():
    """optimizer_step backpropagates CE + the weighted balance and z losses, logs CE alone,
    and the aux-free biases move after the step."""
    reset_accelerate_state()
    accelerator = Accelerator(cpu=True)
    torch.manual_seed(0)
    cfg = tiny(moe_aux_coef=0.5, moe_z_coef=0.1)
    raw = build_model(cfg)
    model, optimizer = accelerator.prepare(raw, make_optimizer(raw, TrainConfig(lr=1e-3)))
    opt, clip = step_and_clip(accelerator, optimizer)
    layers = moe_layers(raw)
    grads = {}
    hook = raw.blocks[0].mlp.router.weight.register_hook(lambda g: grads.setdefault("g", g))
    x, y = torch.randint(0, V, (2, 2, 16))

    class Batches:
        def next(self):
            return [x, y]

    update = Update(opt, clip, list(model.parameters()), 0.0, layers)
    micro_loss = lambda m, x, y: loss(m, x, y, 0.0)  # noqa: E731
    logged = optimizer_step(model, Batches(), accelerator, update, micro_loss)
    hook.remove()
    # the same forward again, from the weights before the step: rebuild them
    torch.manual_seed(0)
    ref = build_model(cfg)
    _, ce = ref(x, y, return_logits=False)
    torch.testing.assert_close(logged, ce.detach())
    aux = sum(m.aux_loss for m in moe_layers(ref))
    (ce_only,) = torch.autograd.grad(ce, ref.blocks[0].mlp.router.weight, retain_graph=True)
    (with_aux,) = torch.autograd.grad(ce + aux, ref.blocks[0].mlp.router.weight)
    torch.testing.assert_close(grads["g"], with_aux)
    assert not torch.allclose(with_aux, ce_only)


@pytest.mark.parametrize(
    "overrides, match",
    [
        (dict(top_k=5), r"top_k \(5\) must be at most n_experts \(4\)"),
        (dict(n_experts=0), "n_experts must be a positive integer"),
        (dict(moe_granularity=3), r"moe_granularity \(3\) must divide the MLP width"),
        (dict(family="encoder"), "mlp='moe' is implemented for family='decoder' only"),
        (dict(family="encoder_decoder"), "mlp='moe' is implemented for family='decoder' only"),
        (dict(parametrization="mup", mup_base_width=32), "parametrization='sp' only"),
        (dict(moe_every=3), r"moe_every \(3\) must be at most n_layers \(2\)"),
        (dict(n_shared_experts=-1), "n_shared_experts must be an integer >= 0"),
        (dict(moe_balance="sinkhorn"), "moe_balance must be one of"),
        (dict(moe_bias_rate=0.1), "moe_bias_rate applies to moe_balance='aux_free' only"),
        (dict(mlp="gelu", n_experts=16), "n_experts applies to mlp='moe' only"),
        (dict(moe_z_coef=-1.0), "moe_z_coef must be a number >= 0"),
    ],
)
def test_bad_moe_input_names_the_field(overrides, match):
    with pytest.raises(ValueError, match=match) as info:
        ModelConfig(**{**TINY, **MOE, **overrides})
    assert "\n" not in str(info.value)


def test_moe_config_round_trips_and_dense_dicts_do_not_change():
    cfg = tiny(n_shared_experts=1, moe_every=2, moe_granularity=2)
    assert ModelConfig.from_dict(cfg.to_dict()) == cfg
    assert cfg.arch == "pre-layernorm-learned-mha-moe4x2g2s1every2"
    dense = ModelConfig(**TINY)
    assert "n_experts" not in dense.to_dict() and "moe_balance" not in dense.to_dict()
    assert [cfg.layer_mlp(i) for i in range(2)] == ["swiglu", "moe"]


@pytest.mark.usefixtures("one_thread")
def test_a_moe_run_trains_and_records_total_and_active_counts(lab):
    from train_helpers import compose, runs_df

    from training.train import train

    overrides = [
        "model.mlp=moe",
        "model.n_experts=4",
        "model.top_k=2",
        "model.n_shared_experts=1",
        "model.moe_balance=aux_free",
        "model.qk_norm=true",
        "train.tokens=2048",
    ]
    result = train(compose(*lab, *overrides))
    assert result.status == "FINISHED" and math.isfinite(result.final_val_loss)
    row = runs_df(lab).iloc[0]
    total, active = (
        int(row["params.n_params_nonembed"]),
        int(row["params.n_params_nonembed_active"]),
    )
    assert active < total
    assert int(row["params.flops_6nd"]) == 6 * active * 2048
    assert int(row["params.n_params"]) - int(row["params.n_params_active"]) == total - active
    assert "moe4x2s1" in row["tags.arch"] and row["tags.arch"].endswith("qknorm")
    # routing statistics at the log cadence: per-expert shares of every MoE layer sum to one
    for layer in range(int(row["params.model.n_layers"])):
        shares = [float(row[f"metrics.moe{layer}_load_e{j}"]) for j in range(4)]
        assert sum(shares) == pytest.approx(1.0)
        assert float(row[f"metrics.moe{layer}_load_max"]) == pytest.approx(4 * max(shares))
        assert float(row[f"metrics.moe{layer}_aux"]) > 0 and float(row[f"metrics.moe{layer}_z"]) > 0
