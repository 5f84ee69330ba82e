"""Architecture ablations in compute terms: effective compute multipliers with intervals.

Each variant gets its own compute frontier L_v(C) = E + A C^-gamma (fitted to its lowest loss
per compute budget). The effective compute multiplier of variant v at compute C is

    m_v(C) = L_base^{-1}(L_v(C)) / C

i.e. how much more compute the baseline needs to reach the loss the variant reaches with C
(m > 1: the variant is better). It is reported at every measured budget and extrapolated to
larger ones, with percentile intervals from a bootstrap that resamples runs within each variant.
When an interval contains 1 the data cannot tell the variant from the baseline.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.bootstrap import percentile_interval, resample_counts
from analysis.chinchilla import budget_groups, envelope
from analysis.powerlaw import PowerLaw, fit_power_laws, theta_of


def seed_spread(runs: pd.DataFrame) -> pd.DataFrame:
    """Loss spread across seeds for each (variant, N, D) trained with more than one seed."""
    key = ["variant", "N", "D"]
    g = runs.groupby(key, sort=True)["loss"]
    spread = g.agg(n_seeds="count", mean="mean", std="std").reset_index()
    return spread[spread["n_seeds"] > 1].reset_index(drop=True)


def _frontier(runs: pd.DataFrame) -> pd.DataFrame:
    """Lowest loss per compute budget: (C, loss) points of the variant's frontier."""
    n_budgets = int(budget_groups(runs["C"]).max()) + 1
    return envelope(runs[["run_id", "N", "C", "loss"]], n_bins=max(n_budgets, 1))


def _frontier_laws(runs: pd.DataFrame, counts: np.ndarray | None, irreducible: bool, warm=None):
    """(R, 3) laws (A, gamma, E) for the frontier of each resample (counts (R, n)) of runs."""
    if counts is None:
        f = _frontier(runs)
        return fit_power_laws(f["C"], f["loss"], irreducible=irreducible)
    fronts = []
    for w in counts:
        sample = runs.iloc[np.repeat(np.arange(len(runs)), w.astype(int))]
        fronts.append(_frontier(sample))
    width = max(len(f) for f in fronts)
    x, y, mask = (
        np.ones((len(fronts), width)),
        np.ones((len(fronts), width)),
        np.zeros((len(fronts), width)),
    )
    for i, f in enumerate(fronts):
        x[i, : len(f)], y[i, : len(f)], mask[i, : len(f)] = f["C"], f["loss"], 1.0
    return fit_power_laws(x, y, irreducible=irreducible, weights=mask, x0=warm)


def _multiplier(base: np.ndarray, variant: np.ndarray, C: np.ndarray) -> np.ndarray:
    """m(C) for R pairs of laws (R, 3) at K budgets: (R, K)."""
    Ab, gb, Eb = (base[:, i : i + 1] for i in range(3))
    Av, gv, Ev = (variant[:, i : i + 1] for i in range(3))
    target = Ev + Av * C[None, :] ** -gv  # variant's loss at C
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        c_base = np.where(target > Eb, ((target - Eb) / Ab) ** (-1.0 / gb), np.nan)
    return c_base / C[None, :]


def compare_variants(
    runs: pd.DataFrame,
    *,
    baseline: str = "base",
    n_boot: int = 1000,
    seed: int = 0,
    extrapolate_to: list[float] | None = None,
    irreducible: bool = False,
) -> dict:
    """Multipliers of every variant over `baseline` at measured and extrapolated budgets.

    `irreducible=False` by default: ablations have a handful of budgets per variant, too few to
    pin down E, and a loose E makes the inverse L_base^{-1} (hence m) explode.
    """
    variants = sorted(runs["variant"].unique())
    if baseline not in variants:
        raise ValueError(f"baseline variant '{baseline}' not among variants {variants}")
    per_variant = {v: runs[runs["variant"] == v].reset_index(drop=True) for v in variants}
    laws, reps = {}, {}
    for i, (v, r) in enumerate(per_variant.items()):
        laws[v] = _frontier_laws(r, None, irreducible)
        warm = theta_of(PowerLaw(*laws[v][0])) if irreducible else None
        counts = resample_counts(len(r), n_boot, seed + i)
        reps[v] = _frontier_laws(r, counts, irreducible, warm)
    top = float(runs["C"].max())
    extrapolate_to = extrapolate_to or [10 * top, 100 * top]
    out: dict = {"baseline": baseline, "irreducible": irreducible, "variants": {}}
    for v in variants:
        measured = np.sort(_frontier(per_variant[v])["C"].to_numpy(dtype=float))
        budgets = np.concatenate([measured, np.asarray(extrapolate_to, dtype=float)])
        point = _multiplier(laws[baseline], laws[v], budgets)[0]
        boot = _multiplier(reps[baseline], reps[v], budgets)
        rows = []
        for k, C in enumerate(budgets):
            ci = percentile_interval(boot[:, k])
            rows.append({
                "C": float(C),
                "measured": bool(k < measured.size),
                "multiplier": float(point[k]),
                "ci95": ci,
                "separable": None if ci is None else not (ci[0] <= 1.0 <= ci[1]),
            })  # fmt: skip
        A, gamma, E = laws[v][0]
        out["variants"][v] = {
            "n_runs": int(len(per_variant[v])),
            "law": {"A": float(A), "gamma": float(gamma), "E": float(E)},
            "law_ci95": {
                name: percentile_interval(reps[v][:, j])
                for j, name in enumerate(("A", "gamma", "E"))
                if irreducible or name != "E"
            },
            "multipliers": rows,
        }
    spread = seed_spread(runs)
    out["seed_spread"] = spread.to_dict(orient="records")
    out["seed_std_median"] = {
        v: float(g["std"].median()) for v, g in spread.groupby("variant", sort=True)
    }
    return out
