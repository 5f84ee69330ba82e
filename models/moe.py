"""Mixture-of-experts MLP (``mlp: moe``): a router, routed experts, optional shared experts.

Routing (per token): router logits (n_experts,) from a bias-free Linear, softmax over all
experts in float32, then the ``top_k`` experts with the largest probability (under
``moe_balance: aux_free`` the choice adds each expert's selection bias, the gate weights do
not: DeepSeek-V3, Liu et al. 2024, sec. 2.1.2). The token's output is the sum of its experts'
outputs, each times its probability (renormalised over the top_k when ``moe_norm_topk``), plus
the shared experts' output. Dropless: every token reaches all of its top_k experts, however
unbalanced the load.

No Python loop over experts: the (token, expert) assignments are sorted by expert and every
expert's rows go through one grouped matmul per projection (``expert_matmul``): the
``torch._grouped_mm`` kernel where it is fast (CUDA), else one ``torch.bmm`` over the experts
with each expert's rows padded to the largest load. On CPU both beat the per-expert Python
loop of Hugging Face's MoE blocks at d_model >= 128 (1.5-3x, forward + backward, 8 experts
top-2; ``benchmarks.moe_dispatch``, results/benchmarks/moe_dispatch_cpu.md) and are within 2x
of each other either way on a loaded machine; the padded bmm stays the CPU default.

Balancing, recorded by each layer on every training forward (``aux_loss``) and added to the
objective by the training step (``regularization``):

- ``aux_loss``: Switch/GShard, E * sum_e f_e P_e, with f_e the fraction of the N * top_k
  assignments that went to expert e and P_e its mean router probability; 1 at uniform load.
  Weighted by ``moe_aux_coef``.
- router z-loss (ST-MoE, Zoph et al. 2022): mean over tokens of logsumexp(logits)^2, weighted
  by ``moe_z_coef``.
- ``aux_free``: each layer counts its tokens per expert over the training forwards of a step;
  ``balance`` (called after the optimizer step) moves the selection bias of each expert by
  ``moe_bias_rate`` x sign(mean load - its load) and resets the counts. Under data parallelism
  each rank counts its own tokens (the bias is a buffer: DDP broadcasts rank 0's).

Parameter names: ``router.weight`` (n_experts, d_model); ``gate_up.weight`` (n_experts,
2 * expert_d_ff, d_model) for SwiGLU experts, rows [gate | up] as ``SwiGLUMLP``, or ``fc.weight``
(n_experts, expert_d_ff, d_model) for GELU experts; ``proj.weight`` (n_experts, d_model,
expert_d_ff): per expert, an ``nn.Linear`` weight's (out, in). ``shared``: one bias-free MLP of
width n_shared_experts x expert_d_ff (the sum of n_shared_experts MLPs of expert width).
``select_bias`` (n_experts,) is a buffer (saved, never trained by the optimizer).
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from models.config import ModelConfig
from models.mlp import GeluMLP, SwiGLUMLP

Kernel = Literal["auto", "grouped", "padded"]


class GroupedLinear(nn.Module):
    """``n`` bias-free Linears of the same shape, weight (n, fan_out, fan_in) ~ N(0, std)."""

    def __init__(self, n: int, fan_in: int, fan_out: int, std: float):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n, fan_out, fan_in).normal_(0.0, std))


def expert_matmul(
    x: torch.Tensor, weight: torch.Tensor, expert: torch.Tensor, counts: torch.Tensor, kernel: str
) -> torch.Tensor:
    """x (M, in) rows sorted by expert, ``expert`` (M,) each row's expert, ``counts`` (E,) rows
    per expert; weight (E, out, in) -> (M, out), row m = x[m] @ weight[expert[m]].T."""
    if kernel == "grouped":
        offsets = counts.cumsum(0).to(torch.int32)  # end row of each expert's group
        return torch._grouped_mm(x, weight.transpose(-2, -1), offs=offsets)
    E, C = weight.shape[0], int(counts.max())  # C: the largest load (one host sync)
    starts = counts.cumsum(0) - counts  # (E,) first row of each expert
    slot = torch.arange(x.shape[0], device=x.device) - starts[expert]  # (M,) row in its group
    padded = x.new_zeros(E, C, x.shape[1]).index_put((expert, slot), x)  # (E, C, in)
    y = torch.bmm(padded, weight.transpose(1, 2))  # (E, C, out)
    return y[expert, slot]  # (M, out)


def _pick_kernel(x: torch.Tensor, weights: list[torch.Tensor]) -> str:
    """``grouped`` on CUDA where torch has it and the strides are 16-byte aligned, else
    ``padded`` (faster on CPU)."""
    if not (x.is_cuda and hasattr(torch, "_grouped_mm")):
        return "padded"
    aligned = all(w.shape[1] * w.element_size() % 16 == 0 for w in weights)
    aligned = aligned and all(w.shape[2] * w.element_size() % 16 == 0 for w in weights)
    return "grouped" if aligned else "padded"


class MoEMLP(nn.Module):
    """Router, ``n_experts`` routed experts, ``n_shared_experts`` shared ones (see module
    docstring). ``kernel``: ``auto`` (default), or ``grouped`` / ``padded`` to force one."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        E, d, f = cfg.n_experts, cfg.d_model, cfg.expert_d_ff
        self.n_experts, self.top_k, self.norm_topk = E, cfg.top_k, cfg.moe_norm_topk
        self.swiglu = cfg.expert_mlp == "swiglu"
        self.aux_coef, self.z_coef = cfg.moe_aux_coef, cfg.moe_z_coef
        self.aux_free, self.bias_rate = cfg.moe_balance == "aux_free", cfg.moe_bias_rate
        self.kernel: Kernel = "auto"
        self.router = nn.Linear(d, E, bias=False)
        if self.swiglu:
            self.gate_up = GroupedLinear(E, d, 2 * f, cfg.init_std)
        else:
            self.fc = GroupedLinear(E, d, f, cfg.init_std)
        self.proj = GroupedLinear(E, f, d, cfg.init_std)
        shared = SwiGLUMLP if self.swiglu else GeluMLP
        width = cfg.n_shared_experts * f
        self.shared = shared(cfg, d_ff=width, bias=False) if width else None
        self.drop = nn.Dropout(cfg.dropout)
        self.register_buffer("select_bias", torch.zeros(E))  # aux_free's; zero otherwise
        self.register_buffer("step_load", torch.zeros(E), persistent=False)  # tokens this step
        # Routing statistics since the last `routing_stats` read: [forwards, aux, z, counts (E)]
        self.register_buffer("interval", torch.zeros(3 + E), persistent=False)
        self.aux_loss: torch.Tensor | None = None  # weighted aux + z loss of the last forward
        self.load: torch.Tensor | None = None  # (E,) share of assignments, last forward

    def residual_projections(self) -> list[nn.Module]:
        return [self.proj] + ([self.shared.proj] if self.shared is not None else [])

    def route(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """x (N, d) -> router logits (N, E) fp32, chosen experts (N, k), gate weights (N, k)."""
        logits = self.router(x).float()  # (N, E)
        probs = logits.softmax(dim=-1)
        choice = probs + self.select_bias if self.aux_free else probs
        idx = choice.topk(self.top_k, dim=-1).indices  # (N, k)
        gates = probs.gather(1, idx)  # (N, k)
        if self.norm_topk:
            gates = gates / gates.sum(dim=-1, keepdim=True)
        return logits, idx, gates

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, d = x.shape
        x2 = x.reshape(B * T, d)  # (N, d)
        logits, idx, gates = self.route(x2)
        flat = idx.reshape(-1)  # (N k,) assignment a = token a // k, its (a % k)-th expert
        order = flat.argsort(stable=True)  # assignments grouped by expert
        expert = flat[order]  # (N k,) sorted
        token = order // self.top_k  # (N k,) the token of each sorted assignment
        counts = torch.bincount(flat, minlength=self.n_experts)  # (E,)
        first = self.gate_up if self.swiglu else self.fc
        kernel = self.kernel
        if kernel == "auto":
            kernel = _pick_kernel(x2, [first.weight, self.proj.weight])
        h = expert_matmul(x2[token], first.weight, expert, counts, kernel)  # (N k, f or 2f)
        if self.swiglu:
            gate, up = h.chunk(2, dim=-1)  # (N k, f) each
            h = F.silu(gate) * up
        else:
            h = F.gelu(h)
        y = expert_matmul(h, self.proj.weight, expert, counts, kernel)  # (N k, d)
        y = y * gates.reshape(-1)[order, None].to(y.dtype)
        out = torch.zeros_like(x2).index_add_(0, token, y.to(x2.dtype))  # (N, d)
        if self.shared is not None:
            out = out + self.shared(x2)
        if self.training:
            self._record(logits, counts)
        return self.drop(out.view(B, T, d))

    def _record(self, logits: torch.Tensor, counts: torch.Tensor) -> None:
        """The weighted balance and z losses of this forward, and the load statistics."""
        probs = logits.softmax(dim=-1)  # (N, E)
        load = counts.float() / counts.sum()  # f_e: share of the N k assignments
        aux = self.n_experts * (load * probs.mean(dim=0)).sum()
        z = torch.logsumexp(logits, dim=-1).square().mean()
        self.aux_loss = self.aux_coef * aux + self.z_coef * z
        self.load = load.detach()
        if self.aux_free:
            self.step_load += counts.to(self.step_load.dtype)
        with torch.no_grad():  # on the device: read (one sync) only at the run's log cadence
            self.interval[0] += 1
            self.interval[1] += aux.detach()
            self.interval[2] += z.detach()
            self.interval[3:] += counts.to(self.interval.dtype)

    @torch.no_grad()
    def balance(self) -> None:
        """aux_free: move the selection biases toward uniform load, reset the step's counts."""
        if self.aux_free and self.step_load.sum() > 0:
            self.select_bias += self.bias_rate * torch.sign(self.step_load.mean() - self.step_load)
        self.step_load.zero_()


def moe_layers(model: nn.Module) -> list[MoEMLP]:
    """The MoE layers of a model (of a compiled or data-parallel wrapper too)."""
    return [m for m in model.modules() if isinstance(m, MoEMLP)]


def regularization(layers: list[MoEMLP]) -> torch.Tensor | None:
    """The sum of the layers' weighted balance and z losses from their last training forward;
    None without MoE layers (or before any training forward)."""
    losses = [m.aux_loss for m in layers if m.aux_loss is not None]
    return sum(losses) if losses else None


def routing_stats(layers: list[MoEMLP]) -> dict[str, float]:
    """Each MoE layer's routing since the last call, then reset: ``moe{i}_load_e{j}`` the share
    of the top_k assignments expert j took (uniform: 1 / n_experts), ``moe{i}_load_max`` and
    ``moe{i}_load_min`` the largest and smallest load over the uniform share (1 = balanced),
    ``moe{i}_aux`` and ``moe{i}_z`` the unweighted balance loss (1 at uniform load) and z-loss,
    means over the training forwards. i counts MoE layers (not blocks). Nothing is dropped or
    overflows (dropless routing), so no drop fraction is kept. One host sync for all layers."""
    stats: dict[str, float] = {}
    rows = [m.interval for m in layers]
    if not rows or float(rows[0][0]) == 0:
        return stats
    values = torch.stack(rows).tolist()  # (layers, 3 + E)
    for i, (m, (n, aux, z, *counts)) in enumerate(zip(layers, values, strict=True)):
        m.interval.zero_()
        total = sum(counts)
        shares = [c / total for c in counts]
        stats.update({f"moe{i}_load_e{j}": s for j, s in enumerate(shares)})
        stats[f"moe{i}_load_max"] = max(shares) * len(shares)
        stats[f"moe{i}_load_min"] = min(shares) * len(shares)
        stats[f"moe{i}_aux"], stats[f"moe{i}_z"] = aux / n, z / n
    return stats


def balance(layers: list[MoEMLP]) -> None:
    """After an optimizer step: aux-free bias updates (a no-op for aux_loss layers)."""
    for m in layers:
        m.balance()
