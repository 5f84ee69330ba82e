"""Loss-curve laws: the loss at every step of a run from its learning-rate schedule.

    CURVE_LAWS["tissue"].predict(theta, features(lrs, steps, "tissue"))

`tissue`: Tissue et al. 2024, "Scaling Law with Learning Rate Annealing" (arXiv 2408.11029),
L(s) = L0 + A S1^-alpha - C S2, S1 = sum of the lr over the steps before s (forward area), S2 =
sum of m_i, m_i = lambda m_(i-1) + (eta_(i-1) - eta_i) (annealing area with momentum, lambda =
0.999 as the paper's default). `multipower`: Luo et al. 2025, the multi-power law (arXiv
2503.12811), L(t) = L0 + A (S1(t) + S_W)^-alpha - LD(t), LD(t) = B sum_k (eta_(k-1) - eta_k)
G(eta_k^-gamma S_k(t)), G(x) = 1 - (C x + 1)^-beta, S_k(t) = sum of the lr from step k to t.
Warmup: both count its lr in the forward area; neither counts its rising lr as annealing
(the papers' equations; Luo et al.'s code counts the rises as negative drops, so their
published parameters need warmup=0 here: `benchmarks.mpl_published`).

Both are `analysis.fits.laws.base.Law`s: fitted by the one engine (start grid, batched L-BFGS,
L-BFGS-B polish, bootstrap refits) and flagged by `analysis.fits.identification`. Their columns are
functions of the lr sequence (`features`), not N and D, so they live in their own registry and
have no compute-optimal allocation. lr is in the run's own units (peak ~1e-3): A, C, B and the
forward area all scale with it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from analysis.fits.laws.base import Law

if TYPE_CHECKING:
    import torch

LAMBDA = 0.999  # Tissue et al.'s decay factor of the annealing momentum
FLOOR = 1e-12  # predicted loss clamped here: a trial theta can drive L0 + ... - C S2 below 0


def _drops(lrs: np.ndarray, warmup: int) -> np.ndarray:
    """eta_(i-1) - eta_i of every step i (0 at step 0 and in warmup)."""
    drop = np.zeros_like(lrs)
    drop[1:] = lrs[:-1] - lrs[1:]
    drop[: warmup + 1] = 0.0
    return drop


def tissue_features(lrs: np.ndarray, steps, warmup: int = 0, lam: float = LAMBDA) -> dict:
    """{S1, S2} (n,) at points after `steps` steps of a run whose steps have lr `lrs`."""
    steps = np.asarray(steps, dtype=int)
    drop = _drops(np.asarray(lrs, dtype=float), warmup)
    m = np.zeros_like(drop)
    for i in range(1, drop.size):
        m[i] = lam * m[i - 1] + drop[i]
    s1 = np.concatenate([[0.0], np.cumsum(lrs)])
    s2 = np.concatenate([[0.0], np.cumsum(m)])
    return {"S1": s1[steps], "S2": s2[steps]}


def multipower_features(lrs: np.ndarray, steps, warmup: int = 0) -> dict:
    """{S1, drop, eta, Sk} at points after `steps` steps: S1 (n,) the forward area with
    warmup, and per point (n, K) over the steps k before it where the lr fell: the fall
    eta_(k-1) - eta_k, eta_k and S_k = sum of the lr from k to the point (padded with 0, 1, 0)."""
    lrs = np.asarray(lrs, dtype=float)
    steps = np.asarray(steps, dtype=int)
    drop = _drops(lrs, warmup)
    csum = np.concatenate([[0.0], np.cumsum(lrs)])
    fell = np.flatnonzero(drop != 0)
    width = max(1, int(max((np.sum(fell < t) for t in steps), default=1)))
    out = {k: np.zeros((steps.size, width)) for k in ("drop", "Sk")}
    out["eta"] = np.ones((steps.size, width))
    for j, t in enumerate(steps):
        ks = fell[fell < t]
        out["drop"][j, : ks.size] = drop[ks]
        out["eta"][j, : ks.size] = lrs[ks]
        out["Sk"][j, : ks.size] = csum[t] - csum[ks]
    out["S1"] = csum[steps]
    return out


def features(law: str, lrs: np.ndarray, steps, warmup: int = 0) -> dict:
    return (tissue_features if law == "tissue" else multipower_features)(lrs, steps, warmup)


def tissue_log_loss(theta: torch.Tensor, cols: dict[str, torch.Tensor]) -> torch.Tensor:
    import torch  # lazy: ~1.7 s, only when a law is evaluated (--help stays fast)

    log_L0, log_A, alpha, log_C = (theta[:, i : i + 1] for i in range(4))  # (k, 1) each
    forward = torch.exp(log_A - alpha * torch.log(cols["S1"]))
    loss = torch.exp(log_L0) + forward - torch.exp(log_C) * cols["S2"]
    return torch.log(loss.clamp_min(FLOOR))


def multipower_log_loss(theta: torch.Tensor, cols: dict[str, torch.Tensor]) -> torch.Tensor:
    import torch  # lazy: ~1.7 s, only when a law is evaluated (--help stays fast)

    log_L0, log_A, alpha, log_B, log_C, beta, gamma = (theta[:, i : i + 1] for i in range(7))
    forward = torch.exp(log_A - alpha * torch.log(cols["S1"]))  # (k, n)
    x = torch.exp(log_C[..., None] - gamma[..., None] * torch.log(cols["eta"])) * cols["Sk"]
    g = 1.0 - torch.exp(-beta[..., None] * torch.log1p(x))  # (k, n, K)
    drop = torch.exp(log_B) * (cols["drop"] * g).sum(-1)
    return torch.log((torch.exp(log_L0) + forward - drop).clamp_min(FLOOR))


TISSUE = Law(
    name="tissue",
    params=("L0", "A", "alpha", "C"),
    log_scale=(True, True, False, True),
    columns=("S1", "S2"),
    log_loss=tissue_log_loss,
    grid={
        "L0": (1.0, 2.5, 4.0),
        "A": (0.03, 0.3, 3.0),
        "alpha": (0.2, 0.5, 1.0),
        "C": (0.3, 3.0, 30.0),
    },
    reference="Tissue et al. 2024, arXiv 2408.11029, eq. 1 (lambda = 0.999)",
    exponents={"alpha": 1},
    tradeoffs={"A": "alpha"},
    irreducible="L0",
    effects=("C",),
)

MULTIPOWER = Law(
    name="multipower",
    params=("L0", "A", "alpha", "B", "C", "beta", "gamma"),
    log_scale=(True, True, False, True, True, False, False),
    columns=("S1", "drop", "eta", "Sk"),
    log_loss=multipower_log_loss,
    grid={
        "L0": (1.0, 2.5, 4.0),
        "A": (0.05, 0.5),
        "alpha": (0.3, 0.6),
        "B": (30.0, 300.0),
        "C": (2.0,),
        "beta": (0.6,),
        "gamma": (0.6,),
    },
    reference="Luo et al. 2025, arXiv 2503.12811, eq. 8 (multi-power law)",
    exponents={"alpha": 1, "beta": 1, "gamma": 1},
    tradeoffs={"A": "alpha", "B": "beta"},
    irreducible="L0",
)

CURVE_LAWS: dict[str, Law] = {law.name: law for law in (TISSUE, MULTIPOWER)}
