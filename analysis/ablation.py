"""Architecture ablations in compute terms: effective compute multipliers with intervals.

Each variant gets its own compute frontier L_v(C) = E + A C^-gamma (fitted to its lowest loss
per compute budget). The effective compute multiplier of variant v at compute C is

    m_v(C) = L_base^{-1}(L_v(C)) / C

i.e. how much more compute the baseline needs to reach the loss the variant reaches with C
(m > 1: the variant is better). It is reported at every measured budget and extrapolated to
larger ones, with percentile intervals from a bootstrap that resamples runs within each variant.

Verdicts (better / worse / cannot tell) are given at measured budgets only, and control the
family-wise error over all of them (every variant x measured budget) with Holm's step-down
procedure. Each cell's p-value is the percentile bootstrap's, dual to its interval: twice the
smaller fraction of finite replicates on either side of m = 1 (so the unadjusted p < 0.05
exactly when the 95% interval excludes 1); a cell is decided when its Holm-adjusted p is below
0.05. p resolves steps of 2/R, so with m cells Holm can decide only when R > 2m/0.05 (1,000
replicates for up to 25 cells; more for larger families).
With ~40 cells at 95% each, an uncorrected reading would call about two differences that are
not there. A cell whose laws are not identified (a frontier exponent outside the plausible
range, or fewer than 80% finite replicates) gets the verdict "not identified".
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.bootstrap import percentile_interval, resample_counts
from analysis.envelope import envelope, padded
from analysis.identification import MIN_CONVERGED, exponent_problem
from analysis.isoflop import budget_groups
from analysis.powerlaw import PowerLaw, fit_power_laws, theta_of

FAMILY_LEVEL = 0.05  # family-wise error rate of the verdicts


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
    fronts = [_frontier(runs.iloc[np.repeat(np.arange(len(runs)), w.astype(int))]) for w in counts]
    x, y, mask = padded(fronts)
    laws = fit_power_laws(x, y, irreducible=irreducible, weights=mask, x0=warm)
    laws[mask.sum(axis=1) < 2] = np.nan  # a replicate whose frontier is one point has no law
    return laws


def _multiplier(base: np.ndarray, variant: np.ndarray, C: np.ndarray) -> np.ndarray:
    """m(C) for R pairs of laws (R, 3) at K budgets: (R, K)."""
    Ab, gb, Eb = (base[:, i : i + 1] for i in range(3))
    Av, gv, Ev = (variant[:, i : i + 1] for i in range(3))
    target = Ev + Av * C[None, :] ** -gv  # variant's loss at C
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        c_base = np.where(target > Eb, ((target - Eb) / Ab) ** (-1.0 / gb), np.nan)
    return c_base / C[None, :]


def holm_adjust(p: np.ndarray) -> np.ndarray:
    """Holm's step-down adjusted p-values (nan stays nan and is not counted in the family)."""
    p = np.asarray(p, dtype=float)
    out = np.full(p.shape, np.nan)
    ok = np.flatnonzero(np.isfinite(p))
    order = ok[np.argsort(p[ok], kind="stable")]
    m = order.size
    adjusted = np.maximum.accumulate((m - np.arange(m)) * p[order])
    out[order] = np.minimum(adjusted, 1.0)
    return out


def percentile_p(point: float, boot: np.ndarray) -> float:
    """Two-sided bootstrap p-value of m = 1: twice the smaller fraction of finite replicates on
    either side of 1 (capped at 1); nan when the estimate or too many replicates are not finite."""
    finite = boot[np.isfinite(boot)]
    if not np.isfinite(point) or finite.size < max(10, MIN_CONVERGED * boot.size):
        return np.nan
    if np.ptp(finite) <= 1e-9 * abs(point):  # a collapsed interval decides nothing
        return np.nan
    tail = min(np.mean(finite <= 1.0), np.mean(finite >= 1.0))
    return float(min(1.0, 2 * tail))


def _law_problem(law: np.ndarray) -> str | None:
    """Why a variant's frontier law L(C) = A C^-gamma cannot carry a multiplier, or None."""
    gamma = law[0, 1]
    if not np.isfinite(gamma):
        return f"frontier exponent gamma = {gamma:.3g} is not finite"
    why = exponent_problem("gamma", gamma)
    return None if why is None else f"frontier exponent {why}"


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
    laws, reps = _fit_variants(per_variant, n_boot, seed, irreducible)
    top = float(runs["C"].max())
    extrapolate_to = extrapolate_to or [10 * top, 100 * top]
    out: dict = {"baseline": baseline, "irreducible": irreducible, "variants": {}}
    cells = []  # (row, finite replicates) of every measured budget of every variant: the Holm family
    for v in variants:
        measured = np.sort(_frontier(per_variant[v])["C"].to_numpy(dtype=float))
        budgets = np.concatenate([measured, np.asarray(extrapolate_to, dtype=float)])
        point = _multiplier(laws[baseline], laws[v], budgets)[0]
        boot = _multiplier(reps[baseline], reps[v], budgets)
        problem = _law_problem(laws[baseline]) or _law_problem(laws[v])
        rows = [
            _multiplier_row(C, k < measured.size, point[k], boot[:, k], problem)
            for k, C in enumerate(budgets)
        ]
        cells += [
            (row, int(np.isfinite(boot[:, k]).sum()))
            for k, row in enumerate(rows)
            if row["measured"] and v != baseline
        ]
        A, gamma, E = laws[v][0]
        out["variants"][v] = {
            "n_runs": int(len(per_variant[v])),
            "law": {"A": float(A), "gamma": float(gamma), "E": float(E)},
            "law_ci95": {
                name: percentile_interval(reps[v][:, j])
                for j, name in enumerate(("A", "gamma", "E"))
                if irreducible or name != "E"
            },
            "not_identified": [] if problem is None else ["multipliers"],
            "why_not_identified": {} if problem is None else {"multipliers": problem},
            "multipliers": rows,
        }
    adjusted = _holm_verdicts(cells, n_boot)
    out["n_comparisons"] = int(np.isfinite(adjusted).sum())
    out["family_level"] = FAMILY_LEVEL
    spread = seed_spread(runs)
    out["seed_spread"] = spread.to_dict(orient="records")
    out["seed_std_median"] = {
        v: float(g["std"].median()) for v, g in spread.groupby("variant", sort=True)
    }
    return out


def _fit_variants(per_variant: dict, n_boot: int, seed: int, irreducible: bool):
    """({variant: frontier law (1, 3)}, {variant: bootstrap laws (R, 3)})."""
    laws, reps = {}, {}
    for i, (v, r) in enumerate(per_variant.items()):
        laws[v] = _frontier_laws(r, None, irreducible)
        warm = theta_of(PowerLaw(*laws[v][0])) if irreducible else None
        # Not stratified by budget: with one or two runs per budget (the demo, two seeds) a
        # within-budget resample barely varies, and the intervals collapse onto the estimate.
        counts = resample_counts(len(r), n_boot, seed + i)
        reps[v] = _frontier_laws(r, counts, irreducible, warm)
    return laws, reps


def _multiplier_row(C: float, measured: bool, point: float, boot: np.ndarray, problem) -> dict:
    """One budget of one variant: the multiplier, its interval and p (verdicts come later)."""
    return {
        "C": float(C),
        "measured": bool(measured),
        "multiplier": float(point),
        "ci95": percentile_interval(boot),
        "p": percentile_p(point, boot) if problem is None else float("nan"),
        "p_holm": float("nan"),
        "why_not_identified": problem,
        "verdict": None,  # measured budgets only, after the Holm step
        "separable": None,
    }


def _holm_verdicts(cells: list[tuple[dict, int]], n_boot: int) -> np.ndarray:
    """Holm-adjust the p of every measured (row, finite replicates) and write each verdict into
    its row; returns the adjusted p."""
    adjusted = holm_adjust(np.array([row["p"] for row, _ in cells]))
    for (row, finite), p_holm in zip(cells, adjusted):
        row["p_holm"] = float(p_holm)
        if not np.isfinite(p_holm):
            row["verdict"] = "not identified"
            row["why_not_identified"] = row["why_not_identified"] or (
                f"only {finite} of {n_boot} bootstrap replicates gave a multiplier (a resample "
                "that lacks a budget has a frontier of one point)"
                if finite < MIN_CONVERGED * n_boot
                else "its interval collapsed to the point"
            )
        elif p_holm < FAMILY_LEVEL:
            row["verdict"] = "better" if row["multiplier"] > 1 else "worse"
        else:
            row["verdict"] = "cannot tell"
        row["separable"] = None if not np.isfinite(p_holm) else bool(p_holm < FAMILY_LEVEL)
    return adjusted


def multiplier_draws(
    runs: pd.DataFrame,
    budgets: dict[str, np.ndarray],
    *,
    baseline: str = "base",
    n_boot: int = 1000,
    seed: int = 0,
    irreducible: bool = False,
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """{variant: (m at its budgets (K,), bootstrap replicates (R, K))}: the laws and resamples
    of `compare_variants` (same runs, seed and n_boot: the same replicates), at any budgets, for
    what is derived from m (time multipliers, extrapolated verdicts)."""
    variants = sorted(runs["variant"].unique())
    per_variant = {v: runs[runs["variant"] == v].reset_index(drop=True) for v in variants}
    laws, reps = _fit_variants(per_variant, n_boot, seed, irreducible)
    out = {}
    for v, C in budgets.items():
        C = np.asarray(C, dtype=float)
        point = _multiplier(laws[baseline], laws[v], C)[0]
        out[v] = (point, _multiplier(reps[baseline], reps[v], C))
    return out
