"""Synthetic runs from any form's known parameters: for tests and for checking a design."""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.laws.base import Law


def runs(law: Law, truth: dict[str, float], N, D, U=None, noise: float = 0.005,
         seed: int = 0) -> pd.DataFrame:
    """One run per (N, D[, U]) row: loss = law(N, D[, U]) * exp(noise * standard normal)."""
    cols = {"N": np.asarray(N, float), "D": np.asarray(D, float)}
    if U is not None:
        cols["U"] = np.asarray(U, float)
    loss = law.predict(law.to_theta(truth), cols)[0]
    loss = loss * np.exp(noise * np.random.default_rng(seed).standard_normal(loss.size))
    frame = pd.DataFrame({"run_id": [f"run-{i:03d}" for i in range(loss.size)], **cols})
    return frame.assign(C=6 * frame["N"] * frame["D"], loss=loss)


def grid(sizes, tokens_per_param) -> tuple[np.ndarray, np.ndarray]:
    """(N, D) of every size crossed with every tokens-per-parameter ratio."""
    N, M = np.meshgrid(np.asarray(sizes, float), np.asarray(tokens_per_param, float))
    return N.ravel(), (N * M).ravel()
