"""Hoffmann et al. 2022, approach 3: L(N, D) = E + A / N^alpha + B / D^beta.

The fit itself is `analysis.parametric` (fit.json's default `parametric` section comes from
there, unchanged); this module gives the form the interface of the other laws, so predictions
and comparisons treat every form alike.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from analysis import parametric
from analysis.laws.base import Law

ORDER = [2, 0, 1, 3, 4]  # analysis.parametric's theta (log A, log B, log E, alpha, beta) -> ours


def log_loss(theta: torch.Tensor, cols: dict[str, torch.Tensor]) -> torch.Tensor:
    log_E, log_A, log_B, alpha, beta = (theta[:, i : i + 1] for i in range(5))
    terms = torch.broadcast_tensors(log_E, log_A - alpha * torch.log(cols["N"]),
                                    log_B - beta * torch.log(cols["D"]))  # fmt: skip
    return torch.logsumexp(torch.stack(terms), dim=0)


def optimal(values: dict[str, np.ndarray], C: np.ndarray, U=None):
    theta = np.column_stack([np.log(values["A"]), np.log(values["B"]), np.log(values["E"]),
                             values["alpha"], values["beta"]])  # fmt: skip
    q = parametric.allocation(theta, C)
    return q["N_opt"], q["D_opt"]


def fitter(law: Law, runs: pd.DataFrame, counts: np.ndarray, fixed: dict | None = None):
    point = parametric.fit_parametric(runs["N"], runs["D"], runs["loss"], fixed=fixed)
    thetas, converged = parametric.bootstrap_parametric(runs["N"], runs["D"], runs["loss"], point,
                                                        counts, fixed=fixed)  # fmt: skip
    with np.errstate(divide="ignore"):  # E -> 0 on a bound: log E = -inf, flagged by reasons
        theta = point.theta[ORDER]
    return theta, point.objective, thetas[:, ORDER], converged


LAW = Law(
    name="chinchilla",
    params=("E", "A", "B", "alpha", "beta"),
    log_scale=(True, True, True, False, False),
    columns=("N", "D"),
    log_loss=log_loss,
    grid={},  # Hoffmann's 4,500-point grid, in analysis.parametric
    reference="Hoffmann et al. 2022, approach 3",
    exponents={"alpha": 1, "beta": 1},
    tradeoffs={"A": "alpha", "B": "beta"},
    irreducible="E",
    optimal=optimal,
    fitter=fitter,
    fitted="jointly from Hoffmann's 4,500-point grid (analysis.parametric)",
)
