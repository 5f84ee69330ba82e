"""Synthetic runs from a known law: for tests, benchmarks and sanity-checking a fit setup.

Approach 3's L(N, D) (`isoflop_runs`, `grid_runs`) or any form of the `analysis.laws`
registry from its parameters (`law_runs`).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.laws.base import Law
from analysis.laws.chinchilla import Parametric

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
    `k`: the runs' C = k 6 N D (an encoder-decoder's, `analysis.compute_factor`), in a column
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
