"""Synthetic runs from a known law: for tests, benchmarks and sanity-checking a fit setup.

Approach 3's L(N, D) (`isoflop_runs`, `grid_runs`) or any form of the `analysis.fits.laws`
registry from its parameters (`law_runs`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from analysis.fits.laws.base import Law
from analysis.fits.laws.chinchilla import Parametric

# Hoffmann et al. (2022) approach-3 values at full precision (Besiroglu et al. 2024, table 1).
HOFFMANN = Parametric(E=1.6934, A=406.40, B=410.72, alpha=0.33917, beta=0.28491)


SPAN = 8.0  # an IsoFLOP profile spans [N_opt / SPAN, N_opt * SPAN]


def isoflop_runs(
    law: Parametric = HOFFMANN,
    budgets=(1e17, 3e17, 1e18, 3e18, 1e19),
    sizes_per_budget: int = 7,
    noise: float = 0.01,
    seed: int = 0,
    variant: str = "base",
    k: float = 1.0,
) -> pd.DataFrame:
    """IsoFLOP design: per budget, N spread geometrically over [N_opt/SPAN, N_opt*SPAN].

    Loss = law(N, D) * exp(noise * standard normal): multiplicative noise, as in log space fits.
    `k`: the runs' C = k 6 N D (an encoder-decoder's, `analysis.data.compute_factor`), in a column
    `k` where it is not 1.
    """
    rng = np.random.default_rng(seed)
    rows = []
    for C in budgets:
        n_opt, _ = law.optimal(C, k)
        for factor in np.geomspace(1 / SPAN, SPAN, sizes_per_budget):
            N = float(n_opt[0] * factor)
            D = C / (6 * k * N)
            loss = float(law.predict(N, D) * np.exp(noise * rng.standard_normal()))
            rows.append(
                {
                    "run_id": f"{variant}-{len(rows):03d}",
                    "variant": variant,
                    "N": N,
                    "D": D,
                    "C": 6 * k * N * D,
                    "loss": loss,
                }
                | ({} if k == 1.0 else {"k": k})
            )
    return pd.DataFrame(rows)


def grid_runs(
    law: Parametric = HOFFMANN,
    sizes=(1e6, 1e9),
    tokens=(1e8, 1e11),
    n: int = 300,
    noise: float = 0.01,
    seed: int = 0,
) -> pd.DataFrame:
    """n runs with N and D drawn log-uniformly from the given ranges."""
    rng = np.random.default_rng(seed)
    N = np.exp(rng.uniform(*np.log(sizes), n))
    D = np.exp(rng.uniform(*np.log(tokens), n))
    loss = law.predict(N, D) * np.exp(noise * rng.standard_normal(n))
    return pd.DataFrame(
        {"run_id": [f"run-{i:04d}" for i in range(n)], "N": N, "D": D, "C": 6 * N * D, "loss": loss}
    )


def law_runs(
    law: Law, truth: dict[str, float], N, D, U=None, noise: float = 0.005, seed: int = 0
) -> pd.DataFrame:
    """One run per (N, D[, U]) row of any form: loss = law(N, D[, U]) * exp(noise * standard
    normal)."""
    cols = {"N": np.asarray(N, float), "D": np.asarray(D, float)}
    if U is not None:
        cols["U"] = np.asarray(U, float)
    loss = law.predict(law.to_theta(truth), cols)[0]
    loss = loss * np.exp(noise * np.random.default_rng(seed).standard_normal(loss.size))
    frame = pd.DataFrame({"run_id": [f"run-{i:03d}" for i in range(loss.size)], **cols})
    return frame.assign(C=6 * frame["N"] * frame["D"], loss=loss)


def size_token_grid(sizes, tokens_per_param) -> tuple[np.ndarray, np.ndarray]:
    """(N, D) of every size crossed with every tokens-per-parameter ratio."""
    N, M = np.meshgrid(np.asarray(sizes, float), np.asarray(tokens_per_param, float))
    return N.ravel(), (N * M).ravel()


@dataclass(frozen=True)
class HparamTruth:
    """A known (lr, batch) surface: loss = L(N, D) x (1 + curvature_lr (ln lr - ln lr*)^2 +
    curvature_batch (ln B - ln B*)^2), lr* = lr_scale N^lr_N D^lr_D (Step Law's form; lr_N =
    lr_D makes it DeepSeek's C form), B* = batch_scale D^batch_D."""

    lr_scale: float = 2.0
    lr_N: float = -0.5
    lr_D: float = 0.2
    batch_scale: float = 20.0
    batch_D: float = 0.5
    curvature_lr: float = 0.02
    curvature_batch: float = 0.01

    def lr_opt(self, N, D):
        return self.lr_scale * np.asarray(N, float) ** self.lr_N * np.asarray(D, float) ** self.lr_D

    def batch_opt(self, D):
        return self.batch_scale * np.asarray(D, float) ** self.batch_D


def hparam_runs(
    truth: HparamTruth, cells, lr_grid, batch_grid, noise: float = 0.0, seed: int = 0
) -> pd.DataFrame:
    """A tuned sweep's runs.csv: every (N, D) cell trained at every (lr, batch) of the grids,
    columns as `analysis.data.load` exports them (arm, tune_role, train.lr, train.batch_tokens)."""
    rng = np.random.default_rng(seed)
    rows = []
    for a, (N, D) in enumerate(cells):
        base = float(HOFFMANN.predict(N, D))
        lr_star, b_star = float(truth.lr_opt(N, D)), float(truth.batch_opt(D))
        for lr in lr_grid:
            for b in batch_grid:
                bowl = truth.curvature_lr * np.log(lr / lr_star) ** 2
                bowl += truth.curvature_batch * np.log(b / b_star) ** 2
                loss = base * (1 + bowl) * np.exp(noise * rng.standard_normal())
                rows.append(
                    {
                        "run_id": f"run-{len(rows):04d}",
                        "arm": f"arm-{a}",
                        "variant": "base",
                        "tune_role": "candidate",
                        "N": float(N),
                        "D": float(D),
                        "C": 6.0 * N * D,
                        "loss": float(loss),
                        "train.lr": float(lr),
                        "train.batch_tokens": float(b),
                    }
                )
    return pd.DataFrame(rows)
