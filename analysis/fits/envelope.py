"""Chinchilla approach 1: the lower envelope of loss against compute (the compute frontier).

The envelope holds the runs (or logged evaluations) that no cheaper point matches; power laws of
N and D along it give the allocation exponents a and b (`powerlaw.frontier_exponents`). The
bootstrap resamples runs and recomputes the envelope in each replicate. The same frontier feeds
the L(C) law (`analysis.fits.fit`) and each variant's L_v(C) in the ablations (`analysis.verdicts.ablation`).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.fits import identification
from analysis.fits.bootstrap import resample_counts
from analysis.fits.powerlaw import exponent_intervals, frontier_exponents


def envelope(points: pd.DataFrame, n_bins: int | None = None) -> pd.DataFrame:
    """The compute frontier (lower envelope of loss vs C) and who attains it.

    A point is on the envelope only if no cheaper point reaches a loss at least as low (a
    running minimum of loss over increasing C; of points at equal C only the lowest counts).
    Then, so that a dense stretch of C does not outweigh the rest in a log-log fit, the
    envelope is thinned to its lowest-loss point per bin of log C: equal-width bins over the
    range of all points, default one bin per ~3 points (3..30). A bin holding only dominated
    points contributes nothing. points: columns N, C, loss (one row per run end, or per logged
    evaluation when training curves are used).
    """
    if n_bins is None:
        n_bins = int(np.clip(len(points) // 3, 3, 30))
    ordered = points.sort_values(["C", "loss"], kind="stable")
    best_before = ordered["loss"].cummin().shift(1, fill_value=np.inf)
    front = ordered[ordered["loss"].to_numpy() < best_before.to_numpy()]
    log_c = np.log(points["C"].to_numpy(dtype=float))
    edges = np.linspace(log_c.min(), log_c.max(), n_bins + 1)
    bins = np.clip(
        np.digitize(np.log(front["C"].to_numpy(dtype=float)), edges[1:-1]), 0, n_bins - 1
    )
    best = front.assign(_bin=bins).sort_values(["_bin", "loss"], kind="stable")
    return best.groupby("_bin", sort=True).head(1).drop(columns="_bin").reset_index(drop=True)


def resampled_envelopes(
    points: pd.DataFrame, counts: np.ndarray, n_bins: int | None = None
) -> list[pd.DataFrame]:
    """The envelope of every bootstrap resample of runs: counts (R, n_runs) over the sorted
    unique `run_id`s of `points` (a run's every row, e.g. its logged evaluations, goes with it).
    The frontier is recomputed inside each replicate, so a replicate that lacks a frontier run
    gets the next-best one, as a new set of runs would."""
    run_ids = points["run_id"].to_numpy()
    _, run_index = np.unique(run_ids, return_inverse=True)
    rows = np.arange(len(points))
    return [
        envelope(points.iloc[np.repeat(rows, w[run_index].astype(int))], n_bins) for w in counts
    ]


def padded(fronts: list[pd.DataFrame], x: str = "C", y: str = "loss"):
    """Ragged frontiers as (R, width) arrays x, y and a 0/1 weight mask (1 = a real point)."""
    width = max(len(f) for f in fronts)
    xs, ys = np.ones((len(fronts), width)), np.ones((len(fronts), width))
    mask = np.zeros((len(fronts), width))
    for i, f in enumerate(fronts):
        xs[i, : len(f)], ys[i, : len(f)], mask[i, : len(f)] = f[x], f[y], 1.0
    return xs, ys, mask


def _tokens(points: pd.DataFrame) -> pd.Series:
    """D of each point: its column D when present (any compute convention), else C / 6N."""
    return points["D"] if "D" in points.columns else points["C"] / (6 * points["N"])


FIXED_RATIO_RTOL = 0.05  # frontier D/N that agree this closely are one planned ratio


def fixed_ratio(front: pd.DataFrame) -> float | None:
    """The one tokens-per-parameter ratio D/N of every frontier point (their geometric mean)
    when they agree within FIXED_RATIO_RTOL, else None. On such a frontier N = sqrt(C / (6 r))
    whatever the law: N_opt ~ C^0.5 is the design, not a measurement."""
    ratio = (front["D_opt"] / front["N"]).to_numpy(dtype=float)
    if ratio.size < 2 or ratio.max() > ratio.min() * (1 + FIXED_RATIO_RTOL):
        return None
    return float(np.exp(np.log(ratio).mean()))


def by_design(ratio: float) -> str:
    """Why a and b of a fixed-ratio frontier are not identified."""
    return (
        f"set by the design: every frontier point has D/N = {ratio:.3g} (within "
        f"{100 * FIXED_RATIO_RTOL:g}%), so N_opt ~ C^0.5 by construction; runs at other D/N "
        "near the same compute would measure it"
    )


def envelope_report(
    points: pd.DataFrame,
    n_boot: int,
    seed: int,
    n_bins: int | None = None,
    fronts: list[pd.DataFrame] | None = None,
) -> dict | None:
    """Approach 1: power laws of N_opt and D_opt along the envelope, bootstrap over runs.

    `fronts`: the replicates' envelopes when already computed (`resampled_envelopes` of these
    points with `resample_counts(n_runs, n_boot, seed)`), e.g. shared with the L(C) law."""
    front = envelope(points, n_bins).assign(D_opt=_tokens)
    point = frontier_exponents(front.rename(columns={"N": "N_opt"}))
    if point is None or front["N"].nunique() < 2:
        return None
    ratio = fixed_ratio(front)
    if ratio is not None:  # no interval: every replicate re-measures the design
        section = {
            **point,
            "envelope": front[["C", "N", "D_opt", "loss"]].to_dict(orient="records"),
            "fixed_ratio": ratio,
            "n_boot": 0,
            "ci95": {},
        }
        why = by_design(ratio)
        return identification.with_reasons(section, {"a": why, "b": why})
    if fronts is None:
        counts = resample_counts(points["run_id"].nunique(), n_boot, seed)
        fronts = resampled_envelopes(points, counts, n_bins)
    reps = [
        frontier_exponents(f.assign(D_opt=_tokens(f)).rename(columns={"N": "N_opt"}))
        if f["N"].nunique() > 1
        else None
        for f in fronts
    ]
    section = {
        **point,
        "envelope": front[["C", "N", "D_opt", "loss"]].to_dict(orient="records"),
        "n_boot": int(n_boot),
        "n_boot_converged": sum(rep is not None for rep in reps),
        "ci95": exponent_intervals(reps),
    }
    section = identification.clip_allocation(section)
    return identification.with_reasons(section, identification.allocation_exponents(section))
