"""Muennighoff et al. 2023, data-constrained scaling: L(N, D, U) with U unique training tokens.

As `scaling_law(N, D, U)` in the README of github.com/huggingface/datablations:
    R_D = max(D / U - 1, 0)                 repetitions of the unique data
    U_N = min(N, D_to_N(U))                 the compute-optimal size for U tokens (Chinchilla)
    R_N = max(N / U_N - 1, 0)               excess parameters
    L = E + A / (U_N + U_N R_N* (1 - exp(-R_N / R_N*)))^alpha
          + B / (U + U R_D* (1 - exp(-R_D / R_D*)))^beta
with D_to_N(D) = (D G)^(beta / alpha) G, G = (alpha A / (beta B))^(1 / (alpha + beta)).

Fitted in two stages, as the paper does: E, A, B, alpha, beta by approach 3 on the
single-epoch runs (D <= U), then R_D* and R_N* on all runs with those five held. Each bootstrap
replicate repeats both stages on its resample. (Stage 1 takes single-epoch runs as plain
Chinchilla runs, so it should not hold runs far larger than compute-optimal for their data.)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from analysis.fits.laws.base import Law, bootstrap, data, fit, fit_and_bootstrap, one_thread
from analysis.fits.laws.chinchilla import LAW as CHINCHILLA

if TYPE_CHECKING:
    import torch

# The README's parameters (C4 fit): a, b, e, alpha, beta, rd_star, rn_star with A = exp(a) etc.
README = dict(
    zip(
        ("a", "b", "e", "alpha", "beta", "rd_star", "rn_star"),
        (6.255414, 7.3049974, 0.6254804, 0.3526596, 0.3526596, 15.387756, 5.309743),
    )
)
PUBLISHED = {
    "E": float(np.exp(README["e"])),
    "A": float(np.exp(README["a"])),
    "B": float(np.exp(README["b"])),
    "alpha": README["alpha"],
    "beta": README["beta"],
    "R_D_star": README["rd_star"],
    "R_N_star": README["rn_star"],
}
SINGLE_EPOCH_RTOL = 1e-9  # D <= U (1 + this): one pass over the unique data


def log_loss(theta: torch.Tensor, cols: dict[str, torch.Tensor]) -> torch.Tensor:
    import torch  # lazy: ~1.7 s, only when a law is evaluated (--help stays fast)

    log_E, log_A, log_B, alpha, beta, log_rd, log_rn = (theta[:, i : i + 1] for i in range(7))
    N, D, U = cols["N"], cols["D"], cols["U"]
    log_G = (torch.log(alpha) + log_A - torch.log(beta) - log_B) / (alpha + beta)
    log_UN = torch.minimum(torch.log(N), (beta / alpha) * (torch.log(U) + log_G) + log_G)
    R_N = torch.clamp(torch.exp(torch.log(N) - log_UN) - 1, min=0)
    R_D = torch.clamp(D / U - 1, min=0)
    rn, rd = torch.exp(log_rn), torch.exp(log_rd)
    log_N_eff = log_UN + torch.log1p(rn * -torch.expm1(-R_N / rn))
    log_D_eff = torch.log(U) + torch.log1p(rd * -torch.expm1(-R_D / rd))
    terms = torch.broadcast_tensors(log_E, log_A - alpha * log_N_eff, log_B - beta * log_D_eff)
    return torch.logsumexp(torch.stack(terms), dim=0)


def optimal(values: dict[str, np.ndarray], C: np.ndarray, U: np.ndarray):
    """(N_opt, D_opt) (R, K) for compute C and unique tokens U: the README's grid search
    (`optimal_allocation`): from Chinchilla's optimum, D times or divided by i and N the
    other way, i in linspace(1.0001, 3, 500), U capped at D; the lowest loss wins (the first
    one in the README's order on ties)."""
    E, A, B, alpha, beta = (values[k][:, None, None] for k in ("E", "A", "B", "alpha", "beta"))
    with np.errstate(all="ignore"):
        G = ((alpha * A) / (beta * B)) ** (1 / (alpha + beta))
        c6 = (np.asarray(C, dtype=float) / 6)[None, :, None]
        n_base = G * c6 ** (beta / (alpha + beta))
        d_base = (1 / G) * c6 ** (alpha / (alpha + beta))
        i = np.linspace(1.0001, 3, 500)
        # README order: for each i, first (D * i, N / i), then (D / i, N * i)
        D = np.stack([d_base * i, d_base / i], axis=-1).reshape(*d_base.shape[:2], -1)
        N = np.stack([n_base / i, n_base * i], axis=-1).reshape(*n_base.shape[:2], -1)
        Ucap = np.minimum(np.asarray(U, dtype=float)[None, :, None], D)
        R, K, G_ = D.shape
        theta = np.column_stack(
            [
                np.log(values["E"]),
                np.log(values["A"]),
                np.log(values["B"]),
                values["alpha"],
                values["beta"],
                np.log(values["R_D_star"]),
                np.log(values["R_N_star"]),
            ]
        )
        loss = np.stack(
            [
                LAW.predict(theta[r], {"N": N[r].ravel(), "D": D[r].ravel(), "U": Ucap[r].ravel()})[
                    0
                ].reshape(K, G_)
                for r in range(R)
            ]
        )
        loss = np.where(np.isfinite(loss), loss, np.inf)
        best = np.argmin(loss, axis=-1)[..., None]
        return np.take_along_axis(N, best, -1)[..., 0], np.take_along_axis(D, best, -1)[..., 0]


def single_epoch(runs: pd.DataFrame) -> np.ndarray:
    return (runs["D"] <= runs["U"] * (1 + SINGLE_EPOCH_RTOL)).to_numpy()


def fitter(law: Law, runs: pd.DataFrame, counts: np.ndarray, fixed: dict | None = None):
    """The two-stage fit and its bootstrap: theta (7,), objective, thetas (R, 7), converged."""
    one = single_epoch(runs)
    stage1, reps1, ok1 = fit_and_bootstrap(CHINCHILLA, runs[one], counts[:, one], fixed)
    head = law.take(CHINCHILLA.settle(stage1.theta), CHINCHILLA)  # E, A, B, alpha, beta
    cols, loss = data(runs, law)
    stars = law.starts()[:, 5:]  # (S, 2) grid of log R_D*, log R_N*
    free = np.array([False] * 5 + [True] * 2)
    with one_thread():
        point = fit(
            law,
            cols,
            loss,
            free=free,
            starts=np.column_stack([np.tile(head, (len(stars), 1)), stars]),
        )
    n_rep = counts.shape[0]
    starts = np.concatenate([point.theta[None, 5:], stars])  # warm start + grid
    per_rep = np.concatenate(
        [
            np.repeat(law.take(reps1, CHINCHILLA)[:, None, :], len(starts), axis=1),
            np.broadcast_to(starts, (n_rep, *starts.shape)),
        ],
        axis=2,
    )
    with one_thread():
        thetas, ok2 = bootstrap(law, cols, loss, counts, per_rep, free=free)
    return point.theta, point.objective, thetas, ok1 & ok2


def extra_reasons(runs: pd.DataFrame, values: dict[str, float]) -> dict[str, str]:
    """R_D* needs repeated runs, R_N* runs larger than compute-optimal for their U."""
    out = {}
    if not (runs["D"] > runs["U"] * (1 + SINGLE_EPOCH_RTOL)).any():
        out["R_D_star"] = "no run repeats its data (D > U), so nothing determines R_D*"
    theta = LAW.to_theta(values)
    log_G = (np.log(theta[3]) + theta[1] - np.log(theta[4]) - theta[2]) / (theta[3] + theta[4])
    u_n = np.exp((theta[4] / theta[3]) * (np.log(runs["U"].to_numpy(float)) + log_G) + log_G)
    if not (runs["N"].to_numpy(float) > u_n * (1 + 1e-9)).any():
        out["R_N_star"] = (
            "no run has more parameters than compute-optimal for its unique "
            "tokens (R_N = 0 everywhere), so nothing determines R_N*"
        )
    return out


LAW = Law(
    name="datablations",
    params=("E", "A", "B", "alpha", "beta", "R_D_star", "R_N_star"),
    log_scale=(True, True, True, False, False, True, True),
    columns=("N", "D", "U"),
    log_loss=log_loss,
    grid={
        "E": (1.0,),
        "A": (1.0,),
        "B": (1.0,),
        "alpha": (0.5,),
        "beta": (0.5,),
        "R_D_star": (1.0, 5.0, 15.0, 50.0),
        "R_N_star": (1.0, 5.0, 15.0, 50.0),
    },
    reference="Muennighoff et al. 2023, github.com/huggingface/datablations README scaling_law",
    exponents={"alpha": 1, "beta": 1},
    tradeoffs={"A": "alpha", "B": "beta"},
    irreducible="E",
    optimal=optimal,
    fitter=fitter,
    extra_reasons=extra_reasons,
    fitted="two stages: E, A, B, alpha, beta by approach 3 on the single-epoch runs (D <= U), "
    "then R_D_star, R_N_star on all runs with those held",
)
