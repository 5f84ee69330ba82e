"""Chinchilla approach 2: IsoFLOP profiles, a parabola of loss in ln N per compute budget.

Runs are grouped into budgets (C within 10% of each other, within one sweep); a group with at
least MIN_PROFILE_SIZES distinct N is a profile. Each profile's parabola gives N_opt(C) and
D_opt = C / (6 k N_opt) (k = C / 6ND of the runs: 1 but for an encoder-decoder,
`analysis.compute_factor`), and power laws through those give the allocation exponents a and b
(`powerlaw.frontier_exponents`), with intervals from a bootstrap within each budget. The budget
grouping is also what the ablations and the extrapolation check use to name a budget.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from analysis import identification
from analysis.bootstrap import resample_counts
from analysis.powerlaw import exponent_intervals, frontier_exponents

MIN_PROFILE_SIZES = 3  # distinct N a budget group needs to be an IsoFLOP profile (a parabola)


def sweep_labels(runs: pd.DataFrame) -> np.ndarray | None:
    """The `sweep` value of every run ('' when missing), or None for no column or one sweep."""
    if "sweep" not in runs.columns:
        return None
    sweeps = runs["sweep"].astype(object).where(runs["sweep"].notna(), "").astype(str)
    sweeps = sweeps.to_numpy()
    return sweeps if np.unique(sweeps).size > 1 else None


def budget_groups(C, rtol: float = 0.1, sweep=None) -> np.ndarray:
    """Label runs by compute budget: sorted budgets within `rtol` of their neighbour share a label.

    Why: planned budgets are met only up to rounding of N and of the token count to whole
    batches, so equal budgets differ by a few percent. With `sweep` (one value per run) groups
    are formed within each sweep: a token grid whose C happens to match a budget of an IsoFLOP
    sweep is not part of that budget. Labels follow the groups' smallest C (then sweep name).
    """
    log_c = np.log(np.asarray(C, dtype=float))
    if sweep is None:
        return _clusters(log_c, rtol)
    sweep = np.asarray(sweep).astype(str)
    groups = []
    for s in np.unique(sweep):
        members = np.flatnonzero(sweep == s)
        sub = _clusters(log_c[members], rtol)
        groups += [(log_c[members[sub == k]].min(), s, members[sub == k]) for k in np.unique(sub)]
    labels = np.empty(log_c.size, dtype=int)
    for label, (_, _, members) in enumerate(sorted(groups, key=lambda g: g[:2])):
        labels[members] = label
    return labels


def _clusters(log_c: np.ndarray, rtol: float) -> np.ndarray:
    order = np.argsort(log_c)
    new_group = np.diff(log_c[order], prepend=log_c[order][0]) > np.log1p(rtol)
    labels = np.empty(log_c.size, dtype=int)
    labels[order] = np.cumsum(new_group)
    return labels


def isoflop_groups(runs: pd.DataFrame, rtol: float = 0.1) -> np.ndarray:
    """Budget label of every run (grouped within each sweep), -1 where its group is not an
    IsoFLOP profile: fewer than MIN_PROFILE_SIZES distinct N (e.g. a fixed-size token grid)."""
    labels = budget_groups(runs["C"], rtol, sweep_labels(runs))
    sizes = pd.Series(np.asarray(runs["N"], dtype=float)).groupby(labels).nunique()
    profiles = sizes.index[sizes >= MIN_PROFILE_SIZES].to_numpy()
    return np.where(np.isin(labels, profiles), labels, -1)


def budget_of(C) -> float:
    """The compute budget a group of runs stands for: the geometric mean of their C."""
    return float(np.exp(np.average(np.log(np.asarray(C, dtype=float)))))


@dataclass(frozen=True)
class IsoflopProfiles:
    """The IsoFLOP profiles of a set of runs: which runs form which profile, and its name.

    Approach 2's table and its figure both come from here, so they name the same profiles.
    `sweeps` is set when the runs come from several sweeps (even if only one of them holds
    profiles, e.g. an IsoFLOP ladder next to a token grid): each profile then names its sweep.
    """

    runs: pd.DataFrame  # the runs that belong to a profile, index reset
    labels: np.ndarray  # profile of each of those runs: its budget group (`isoflop_groups`)
    sweeps: np.ndarray | None  # sweep of each of those runs; None for a single sweep

    @property
    def ids(self) -> np.ndarray:
        """Profile labels in order of budget (then sweep)."""
        return np.unique(self.labels)

    def budget(self, k) -> float:
        return budget_of(self.runs["C"][self.labels == k])

    def sweep(self, k) -> str | None:
        return None if self.sweeps is None else str(self.sweeps[self.labels == k][0])

    def name(self, k) -> str:
        """'C' or 'C (sweep)', C as the report's tables print it."""
        sweep = self.sweep(k)
        return f"{self.budget(k):.3g}" + ("" if sweep is None else f" ({sweep})")


def isoflop_profiles(runs: pd.DataFrame, rtol: float = 0.1) -> IsoflopProfiles | None:
    """The runs of `runs` that form IsoFLOP profiles (`isoflop_groups`), or None when none do."""
    labels = isoflop_groups(runs, rtol)
    if (labels < 0).all():
        return None
    keep = labels >= 0
    sweeps = sweep_labels(runs)  # of every input run: one profile sweep among several is named
    return IsoflopProfiles(
        runs=runs[keep].reset_index(drop=True),
        labels=labels[keep],
        sweeps=None if sweeps is None else sweeps[keep],
    )


def isoflop_optima(N, C, loss, labels, weights=None, k: float = 1.0) -> pd.DataFrame:
    """Per budget: parabola of loss in ln N, its minimum N_opt, D_opt = C / (6 k N_opt).

    Budgets with fewer than 3 distinct N (or non-convex parabolas) are listed with N_opt = nan.
    """
    N, C, loss = (np.asarray(v, dtype=float) for v in (N, C, loss))
    weights = np.ones(N.size) if weights is None else np.asarray(weights, dtype=float)
    rows = []
    for label in np.unique(labels):
        sel = (labels == label) & (weights > 0)
        budget = budget_of(C[labels == label])
        x, y, w = np.log(N[sel]), loss[sel], weights[sel]
        row = {"C": budget, "n_points": int(sel.sum()), "N_opt": np.nan, "D_opt": np.nan,
               "loss_opt": np.nan, "interior": False, "N_min": np.nan, "N_max": np.nan,
               "N_best": np.nan}  # fmt: skip
        if sel.any():  # what was measured: the size range and the size with the lowest loss
            row.update(N_min=float(np.exp(x.min())), N_max=float(np.exp(x.max())),
                       N_best=float(np.exp(x[np.argmin(y)])))  # fmt: skip
        if np.unique(x).size >= 3:
            c2, c1, c0 = np.polyfit(x, y, 2, w=np.sqrt(w))  # polyfit weights residuals
            if c2 > 0:
                x_opt = -c1 / (2 * c2)
                row.update(
                    N_opt=float(np.exp(x_opt)),
                    D_opt=float(budget / (6 * k * np.exp(x_opt))),
                    loss_opt=float(c0 + c1 * x_opt + c2 * x_opt**2),
                    interior=bool(x.min() <= x_opt <= x.max()),
                    curvature=float(c2),
                )
        rows.append(row)
    return pd.DataFrame(rows)



def isoflop_report(
    runs: pd.DataFrame, n_boot: int, seed: int, rtol: float = 0.1, k: float = 1.0
) -> dict | None:
    """Approach 2 with bootstrap over runs, resampled within each budget; None without data.

    Only IsoFLOP profiles are used (`isoflop_profiles`: budgets grouped within each sweep, at
    least 3 distinct N); other runs are left to approaches 1 and 3.
    """
    profiles = isoflop_profiles(runs, rtol)
    if profiles is None:
        return None
    runs, labels = profiles.runs, profiles.labels
    optima = isoflop_optima(runs["N"], runs["C"], runs["loss"], labels, k=k)
    if profiles.sweeps is not None:  # several sweeps: say which one each profile comes from
        optima.insert(0, "sweep", [profiles.sweep(k) for k in profiles.ids])
    point = frontier_exponents(optima)
    if point is None:  # profiles exist, but fewer than 2 have a minimum: say so
        why = "fewer than two budgets have a convex parabola in log N"
        section = {"per_budget": optima.to_dict(orient="records"), "n_boot": 0}
        return identification.with_reasons(section, {"a": why, "b": why})
    counts = resample_counts(len(runs), n_boot, seed, strata=labels)
    reps = [frontier_exponents(isoflop_optima(runs["N"], runs["C"], runs["loss"], labels, w, k))
            for w in counts]  # fmt: skip
    section = {
        **point,
        "per_budget": optima.to_dict(orient="records"),
        "n_boot": int(n_boot),
        "ci95": exponent_intervals(reps),
    }
    section = identification.clip_allocation(section)
    reasons = identification.allocation_exponents(section)
    n_interior = int(optima["interior"].sum())
    if n_interior < 2:
        why = (f"only {n_interior} budget(s) have their minimum inside the measured sizes; the "
               "others are extrapolated parabolas")  # fmt: skip
        reasons = {"a": why, "b": why, **reasons}
    return identification.with_reasons(section, reasons)
