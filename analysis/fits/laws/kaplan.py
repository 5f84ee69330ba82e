"""Kaplan et al. 2020, eq. 1.5 (and 4.1): L(N, D) = [(N_c / N)^(alpha_N / alpha_D) + D_c / D]^alpha_D.

No irreducible term: the law tends to (N_c / N)^alpha_N at infinite data and to
(D_c / D)^alpha_D at infinite size. Published fit to L(N, D) (Table 2): alpha_N = 0.076,
alpha_D = 0.103, N_c = 6.4e13 non-embedding parameters, D_c = 1.8e13 tokens.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from analysis.fits.laws.base import Law

if TYPE_CHECKING:
    import torch

PUBLISHED = {"alpha_N": 0.076, "alpha_D": 0.103, "N_c": 6.4e13, "D_c": 1.8e13}


def log_loss(theta: torch.Tensor, cols: dict[str, torch.Tensor]) -> torch.Tensor:
    import torch  # lazy: ~1.7 s, only when a law is evaluated (--help stays fast)

    log_Nc, log_Dc, alpha_N, alpha_D = (theta[:, i : i + 1] for i in range(4))  # (k, 1) each
    size_term = (alpha_N / alpha_D) * (log_Nc - torch.log(cols["N"]))  # log (N_c/N)^(aN/aD)
    data_term = log_Dc - torch.log(cols["D"])  # log D_c / D
    return alpha_D * torch.logaddexp(size_term, data_term)  # (k, n)


def optimal(values: dict[str, np.ndarray], C: np.ndarray, U=None):
    """(N_opt, D_opt) (R, K) minimising L under C = 6ND: with p = alpha_N / alpha_D, the
    minimum of (N_c/N)^p + 6 D_c N / C is at N^(p+1) = p N_c^p C / (6 D_c). (Kaplan et al.
    derive their own allocation from L(N, S_min) instead; this is the one of eq. 1.5.)"""
    p = (values["alpha_N"] / values["alpha_D"])[:, None]
    log_n = (
        np.log(p)
        + p * np.log(values["N_c"])[:, None]
        + np.log(C)[None, :]
        - np.log(6 * values["D_c"])[:, None]
    ) / (p + 1)
    n_opt = np.exp(log_n)
    return n_opt, C[None, :] / (6 * n_opt)


LAW = Law(
    name="kaplan",
    params=("N_c", "D_c", "alpha_N", "alpha_D"),
    log_scale=(True, True, False, False),
    columns=("N", "D"),
    log_loss=log_loss,
    grid={
        "N_c": (1e8, 1e11, 1e14, 1e17),
        "D_c": (1e8, 1e11, 1e14, 1e17),
        "alpha_N": (0.05, 0.1, 0.3, 0.6),
        "alpha_D": (0.05, 0.1, 0.3, 0.6),
    },
    reference="Kaplan et al. 2020, eq. 1.5",
    exponents={"alpha_N": 1, "alpha_D": 1},
    tradeoffs={"N_c": "alpha_N", "D_c": "alpha_D"},
    optimal=optimal,
)
