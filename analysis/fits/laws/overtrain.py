"""Gadre et al. 2024 (over-training): L(N, M) = E + a N^b + c 6^(b/2) (M N)^b, M = D / N.

Chinchilla's form with one exponent shared by N and D (b < 0), written in tokens per parameter
M so that a fit on few, small runs at several M extrapolates to over-trained large ones. Names
as in the paper's code (`scaling/laws.py`, `powlaw_ours`: alpha, beta there are a, c here);
its start grid is theirs: a, c in {1e2, 3e2, 1e3, 3e3}, b in {-0.1, -0.3}, E in {.., 1, 2, 10}
(their E = 0 start becomes 0.5: E is fitted as a log here).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from analysis.fits.laws.base import Law

if TYPE_CHECKING:
    import torch

LOG6 = float(np.log(6.0))


def log_loss(theta: torch.Tensor, cols: dict[str, torch.Tensor]) -> torch.Tensor:
    import torch  # lazy: ~1.7 s, only when a law is evaluated (--help stays fast)

    log_E, log_a, b, log_c = (theta[:, i : i + 1] for i in range(4))  # (k, 1) each
    log_N = torch.log(cols["N"])
    log_MN = torch.log(cols["D"])  # M N = D
    size = log_a + b * log_N
    data = log_c + 0.5 * b * LOG6 + b * log_MN
    return torch.logsumexp(torch.stack(torch.broadcast_tensors(log_E, size, data)), dim=0)


def optimal(values: dict[str, np.ndarray], C: np.ndarray, U=None):
    """(N_opt, D_opt) (R, K) under C = 6ND: Chinchilla's allocation with alpha = beta = -b,
    A = a, B = c 6^(b/2), so N_opt = G (C/6)^(1/2), G = (a / B)^(-1/(2b)); M_opt = D/N is
    the same at every C."""
    a, b, c = values["a"][:, None], values["b"][:, None], values["c"][:, None]
    log_B = np.log(c) + 0.5 * b * LOG6
    log_G = (np.log(a) - log_B) / (-2 * b)
    log_half = 0.5 * np.log(C / 6.0)[None, :]
    return np.exp(log_G + log_half), np.exp(-log_G + log_half)


LAW = Law(
    name="overtrain",
    params=("E", "a", "b", "c"),
    log_scale=(True, True, False, True),
    columns=("N", "D"),
    log_loss=log_loss,
    grid={
        "E": (0.5, 1.0, 2.0, 10.0),
        "a": (1e2, 3e2, 1e3, 3e3),
        "b": (-0.1, -0.3),
        "c": (1e2, 3e2, 1e3, 3e3),
    },
    reference="Gadre et al. 2024, scaling/laws.py powlaw_ours",
    exponents={"b": -1},
    tradeoffs={"a": "b", "c": "b"},
    irreducible="E",
    optimal=optimal,
)
