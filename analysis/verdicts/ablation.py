"""Architecture ablations in compute terms: effective compute multipliers from measured losses.

The effective compute multiplier of variant v at compute C is m_v(C) = C_base(L_v(C)) / C: how
much more compute the baseline needs to reach the loss the variant reaches with C (m > 1: the
variant is better). Both sides are measured where the runs allow:

- L_v(C): the variant's measured frontier loss at one of its budgets (a cell: the mean over its
  seeds; the frontier is the lowest loss per compute budget).
- C_base(L): the baseline's measured frontier, interpolated linearly in log C, where its points
  bracket L ("interpolated"). Outside the bracket the baseline's frontier law L = A C^-gamma is
  used ("baseline law", an extrapolation) only if it passed `analysis.fits.law_check` against its own
  frontier points; otherwise the bracket bounds m ("bound": the baseline needs more than its
  largest measured compute, or less than its smallest).

The verdict at a measured budget compares the variant's loss with the baseline's at the same
compute (interpolated the same way; a budget within 10% of the baseline's smallest or largest
is that budget, as planned budgets differ by the rounding of N): m > 1 exactly when the
variant's loss is lower. Intervals
and p carry the runs' noise: each of R replicates adds N(0, sigma^2 / seeds) to every cell's
loss (sigma: `analysis.verdicts.noise`, the seed spread where the sweep has seeds), recomputes both
frontiers and re-interpolates (Porian et al. 2024's noise-and-interpolate bootstrap). p is twice
the smaller share of replicates on either side of "no difference"; verdicts are Holm-controlled
over every variant x measured budget (better / worse / cannot tell / not identified).

Extrapolated multipliers (10x and 100x the largest measured compute) come from the two laws
only when both passed the check on their frontiers; where the laws cross between the largest
measured budget and the target, the extrapolation reverses what the runs measured and is not
stated. Runs on the unigram plateau (`analysis.verdicts.noise`) are left out of the laws, not of the
measured frontier.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.fits import law_check
from analysis.fits.bootstrap import percentile_interval
from analysis.fits.identification import MIN_CONVERGED, exponent_problem
from analysis.fits.isoflop import budget_groups
from analysis.fits.powerlaw import fit_power_laws
from analysis.verdicts import matched, noise
from analysis.verdicts.matched import holm_adjust

FAMILY_LEVEL = 0.05  # family-wise error rate of the verdicts
ESTIMATED = ("interpolated", "baseline law")  # the methods that give m (the others bound it)
BUDGET_RTOL = 0.1  # budgets this close are one budget (as `isoflop.budget_groups` groups them)
MIN_LAW_POINTS = 3  # a 2-parameter frontier law needs a point more than it has to be checked

__all__ = ["FAMILY_LEVEL", "compare_variants", "holm_adjust", "multiplier_draws", "percentile_p"]


def seed_spread(runs: pd.DataFrame) -> pd.DataFrame:
    """Loss spread across seeds for each (variant, N, D) trained with more than one seed."""
    g = runs.groupby(["variant", "N", "D"], sort=True)["loss"]
    spread = g.agg(n_seeds="count", mean="mean", std="std").reset_index()
    return spread[spread["n_seeds"] > 1].reset_index(drop=True)


def percentile_p(point: float, boot: np.ndarray, null: float = 1.0) -> float:
    """Two-sided bootstrap p-value of `null`: twice the smaller share of finite replicates on
    either side (capped at 1); nan when the estimate or too many replicates are not finite."""
    finite = boot[np.isfinite(boot)]
    if not np.isfinite(point) or finite.size < max(10, MIN_CONVERGED * boot.size):
        return np.nan
    if np.ptp(finite) <= 1e-9 * max(abs(point), 1e-12):  # a collapsed interval decides nothing
        return np.nan
    tail = min(np.mean(finite <= null), np.mean(finite >= null))
    return float(min(1.0, 2 * tail))


class _Arm:
    """One variant's cells, frontier (cell indices), law and its check, and R noisy replicates
    of its cell losses."""

    def __init__(self, runs: pd.DataFrame, sigma: float, n_boot: int, seed: int, irreducible):
        g = runs.groupby(["N", "D"], sort=True)
        c = g.agg(C=("C", "mean"), loss=("loss", "mean"), seeds=("loss", "size"))
        c = c.reset_index().sort_values(["C", "loss"], kind="stable").reset_index(drop=True)
        h = noise.unigram_entropy(runs)
        self.cells = c
        self.noise = sigma / np.sqrt(c["seeds"].to_numpy(dtype=float))  # (n,)
        self.plateau = (
            np.zeros(len(c), bool)
            if h is None
            else (c["loss"].to_numpy() > h - noise.PLATEAU_Z * self.noise)
        )
        self.n_runs = len(runs)
        rng = np.random.default_rng(seed)
        loss = c["loss"].to_numpy(dtype=float)
        self.boot = loss + rng.standard_normal((n_boot, len(c))) * self.noise  # (R, n)
        self.bins = _bins(c["C"].to_numpy(dtype=float))
        self.front = _front(loss[None, :], self.bins)[0]  # (n,) bool
        self.boot_front = _front(self.boot, self.bins)  # (R, n)
        self.irreducible = irreducible
        self.law, self.check = self._fit(loss)
        self.boot_laws = self._boot_laws()

    def _law_points(self, front: np.ndarray) -> np.ndarray:
        return front & ~self.plateau

    def _fit(self, loss: np.ndarray):
        use = self._law_points(self.front)
        C = self.cells["C"].to_numpy(dtype=float)
        if use.sum() < MIN_LAW_POINTS:
            return None, {
                "describes": False,
                "n_points": int(use.sum()),
                "why": f"only {int(use.sum())} frontier point(s) off the plateau; a law needs "
                f"{MIN_LAW_POINTS}",
            }
        law = fit_power_laws(C[use], loss[use], irreducible=self.irreducible)[0]
        pred = law[2] + law[0] * C[use] ** -law[1]
        labels = [f"C = {x:.3g}" for x in C[use]]
        check = law_check.check(loss[use], pred, self.noise[use], labels)
        why = exponent_problem("gamma", law[1]) if np.isfinite(law[1]) else "the fit failed"
        if why:
            check = {**check, "describes": False, "why": f"frontier exponent {why}"}
        return law, check

    def _boot_laws(self) -> np.ndarray | None:
        if self.law is None:
            return None
        C = self.cells["C"].to_numpy(dtype=float)
        use = self._law_points(self.boot_front)  # (R, n)
        x = np.broadcast_to(C, use.shape)
        laws = fit_power_laws(x, self.boot, irreducible=self.irreducible, weights=use.astype(float))
        laws[use.sum(axis=1) < 2] = np.nan
        return laws

    @property
    def law_ok(self) -> bool:
        return self.law is not None and bool(self.check["describes"])

    def frontier(self, r: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(log C, loss) of the frontier, C increasing (loss decreasing); r: a replicate."""
        front = self.front if r is None else self.boot_front[r]
        loss = self.cells["loss"].to_numpy(dtype=float) if r is None else self.boot[r]
        return np.log(self.cells["C"].to_numpy(dtype=float)[front]), loss[front]


def _bins(C: np.ndarray) -> np.ndarray:
    """Each cell's compute-budget bin (one per budget group, equal width in log C), as in
    `analysis.fits.envelope.envelope`."""
    n_bins = max(int(budget_groups(C).max()) + 1, 1)
    log_c = np.log(C)
    edges = np.linspace(log_c.min(), log_c.max(), n_bins + 1)
    return np.clip(np.digitize(log_c, edges[1:-1]), 0, n_bins - 1)


def _front(loss: np.ndarray, bins: np.ndarray) -> np.ndarray:
    """(R, n) bool: the lower envelope of each row of losses (cells sorted by C): a cell no
    cheaper cell matches, then the lowest such cell per budget bin."""
    best_before = np.minimum.accumulate(
        np.concatenate([np.full((loss.shape[0], 1), np.inf), loss[:, :-1]], axis=1), axis=1
    )
    on = loss < best_before
    out = np.zeros_like(on)
    for b in np.unique(bins):
        members = np.flatnonzero(bins == b)
        masked = np.where(on[:, members], loss[:, members], np.inf)
        pick = members[np.argmin(masked, axis=1)]
        has = np.isfinite(masked).any(axis=1)
        out[np.flatnonzero(has), pick[has]] = True
    return out


def _law_loss(law, C):
    return law[..., 2:3] + law[..., 0:1] * np.asarray(C, float) ** -law[..., 1:2]


def _law_compute(law, L):
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        A, g, E = law[..., 0:1], law[..., 1:2], law[..., 2:3]
        return np.where(L > E, ((L - E) / A) ** (-1.0 / g), np.nan)


def _measured(base: _Arm, L_v: float, C_v: float, r: int | None):
    """(m, method, loss gap) of one variant cell against the baseline's frontier (replicate r).
    method: 'interpolated', 'baseline law', '>' or '<' (a bound), or None (not identified)."""
    log_c, loss = base.frontier(r)
    law = base.law if r is None else (base.boot_laws[r] if base.boot_laws is not None else None)
    lc = np.log(C_v)
    # the baseline's loss at the variant's compute, for the verdict; a budget within
    # BUDGET_RTOL of the baseline's end point is that budget (planned budgets differ by the
    # rounding of N: the 2017 block's 1e5 size has 2% fewer parameters than the llama block's)
    near = np.log1p(BUDGET_RTOL)
    if log_c[0] - near <= lc <= log_c[-1] + near:
        gap = L_v - np.interp(np.clip(lc, log_c[0], log_c[-1]), log_c, loss)
    elif base.law_ok and law is not None:
        gap = L_v - float(_law_loss(law, C_v)[0])
    else:
        gap = np.nan
    # the baseline's compute for the variant's loss, for the multiplier
    if loss[-1] <= L_v <= loss[0]:
        return np.exp(np.interp(L_v, loss[::-1], log_c[::-1])) / C_v, "interpolated", gap
    if base.law_ok and law is not None:
        return float(_law_compute(law, L_v)[0]) / C_v, "baseline law", gap
    if L_v < loss[-1]:
        return np.exp(log_c[-1]) / C_v, ">", gap
    return np.exp(log_c[0]) / C_v, "<", gap


def _measured_rows(base: _Arm, arm: _Arm, n_boot: int) -> list[dict]:
    """One row per frontier cell of `arm`: multiplier, interval, loss gap, p (verdicts later)."""
    rows = []
    for k in np.flatnonzero(arm.front):
        C_v = float(arm.cells["C"].iloc[k])
        m, method, gap = _measured(base, float(arm.cells["loss"].iloc[k]), C_v, None)
        draws = [_measured(base, arm.boot[r, k], C_v, r) for r in range(n_boot)]
        # every replicate's m by the same rule as the estimate (a bound is censored: nan)
        boot_m = np.array([d[0] if d[1] in ESTIMATED else np.nan for d in draws], dtype=float)
        boot_gap = np.array([d[2] for d in draws], dtype=float)
        p = percentile_p(gap, boot_gap, null=0.0)
        why = None
        if not np.isfinite(gap):
            why = (
                "outside the baseline's measured compute, and its frontier law does not "
                "describe its runs"
            )
        rows.append(
            {
                "C": C_v,
                "measured": True,
                "multiplier": float(m),
                "method": method,
                "ci95": percentile_interval(boot_m)
                if method in ("interpolated", "baseline law")
                else None,
                "loss": float(arm.cells["loss"].iloc[k]),
                "loss_gap": float(gap),
                "loss_gap_ci95": percentile_interval(boot_gap),
                "on_plateau": bool(arm.plateau[k]),
                "p": p,
                "p_holm": float("nan"),
                "why_not_identified": why,
                "verdict": None,
                "separable": None,
                "_boot": boot_m,
            }
        )
    return rows


def _crossing(base: _Arm, arm: _Arm) -> float | None:
    """C where the two pure power laws cross (None: parallel, or not pure power laws)."""
    (Ab, gb, Eb), (Av, gv, Ev) = base.law, arm.law
    if Eb or Ev or abs(gv - gb) < 1e-12:
        return None
    log_c = np.log(Av / Ab) / (gv - gb)
    return float(np.exp(log_c)) if log_c < 700 else None


def _law_draws(base: _Arm, arm: _Arm, C: np.ndarray, top: float):
    """(point (K,), replicates (R, K), why) of the law-extrapolated multiplier at budgets C."""
    nan = np.full(C.size, np.nan)
    boot_nan = np.full((base.boot.shape[0], C.size), np.nan)
    for name, a in (("the baseline's", base), ("the variant's", arm)):
        if not a.law_ok:
            why = a.check.get("why") or law_check.verdict(f"{name} frontier law", a.check)
            return nan, boot_nan, why
    point = _law_compute(base.law[None, :], _law_loss(arm.law[None, :], C))[0] / C
    boot = _law_compute(base.boot_laws, _law_loss(arm.boot_laws, C[None, :])) / C[None, :]
    cross = _crossing(base, arm)
    if cross is not None and top < cross <= float(C.max()):
        why = (
            f"the two frontier laws cross at C = {cross:.3g}, beyond the runs: the "
            "extrapolation would reverse what they measured"
        )
        beyond = C >= cross
        point, boot = np.where(beyond, np.nan, point), np.where(beyond[None, :], np.nan, boot)
        return point, boot, why
    return point, boot, None


def _extrapolated_row(C: float, point: float, boot: np.ndarray, why: str | None) -> dict:
    return {
        "C": float(C),
        "measured": False,
        "multiplier": float(point),
        "method": "laws",
        "ci95": None if why else percentile_interval(boot),
        "p": float("nan"),
        "p_holm": float("nan"),
        "why_not_identified": why,
        "verdict": None,
        "separable": None,
    }


class _Ablation:
    """Every arm of one ablation with the same noise model and replicates."""

    def __init__(self, runs, baseline, n_boot, seed, irreducible):
        variants = sorted(runs["variant"].unique())
        if baseline not in variants:
            raise ValueError(f"baseline variant '{baseline}' not among variants {variants}")
        self.baseline, self.n_boot = baseline, n_boot
        self.noise = noise.noise_scale(runs)
        self.arms = {
            v: _Arm(runs[runs["variant"] == v], self.noise["sigma"], n_boot, seed + i, irreducible)
            for i, v in enumerate(variants)
        }
        self.top = float(runs["C"].max())

    def draws(self, v: str, C) -> tuple[np.ndarray, np.ndarray]:
        """m at budgets C (K,) and its replicates (R, K): measured where C is one of v's
        frontier cells, else from the laws (nan where they cannot be used)."""
        C = np.asarray(C, dtype=float)
        base, arm = self.arms[self.baseline], self.arms[v]
        rows = {round(r["C"], 6): r for r in _measured_rows(base, arm, self.n_boot)}
        point, boot = _law_draws(base, arm, C, self.top)[:2]
        point, boot = point.copy(), boot.copy()
        for j, c in enumerate(C):
            r = rows.get(round(float(c), 6))
            if r is not None:
                point[j], boot[:, j] = r["multiplier"], r["_boot"]
        return point, boot


def compare_variants(
    runs: pd.DataFrame,
    *,
    baseline: str = "base",
    n_boot: int = 1000,
    seed: int = 0,
    extrapolate_to: list[float] | None = None,
    irreducible: bool = False,
) -> dict:
    """Multipliers of every variant over `baseline` at its measured budgets (from measured
    losses) and at extrapolated ones (from checked laws), the matched cells, the noise scale,
    the plateau and every frontier law's check."""
    ab = _Ablation(runs, baseline, n_boot, seed, irreducible)
    extrapolate_to = np.asarray(extrapolate_to or [10 * ab.top, 100 * ab.top], dtype=float)
    base = ab.arms[baseline]
    out: dict = {"baseline": baseline, "irreducible": irreducible, "n_boot": n_boot}
    out["noise"] = ab.noise
    out["plateau"] = noise.plateau_section(runs, ab.noise["sigma"])
    out["matched"] = matched.section(runs, baseline, ab.noise)
    out["variants"] = {}
    cells = []  # every measured row of every variant: the Holm family
    for v, arm in ab.arms.items():
        rows = [] if v == baseline else _measured_rows(base, arm, n_boot)
        cells += rows
        if v != baseline:
            point, boot, why = _law_draws(base, arm, extrapolate_to, ab.top)
            rows += [
                _extrapolated_row(C, point[k], boot[:, k], why)
                for k, C in enumerate(extrapolate_to)
            ]
        for r in rows:
            r.pop("_boot", None)
        out["variants"][v] = _variant_entry(arm, rows, irreducible)
    adjusted = _holm_verdicts(cells, n_boot)
    out["n_comparisons"] = int(np.isfinite(adjusted).sum())
    out["family_level"] = FAMILY_LEVEL
    spread = seed_spread(runs)
    out["seed_spread"] = spread.to_dict(orient="records")
    out["seed_std_median"] = {
        v: float(g["std"].median()) for v, g in spread.groupby("variant", sort=True)
    }
    return out


def _variant_entry(arm: _Arm, rows: list[dict], irreducible: bool) -> dict:
    law = arm.law if arm.law is not None else np.full(3, np.nan)
    reps = arm.boot_laws if arm.boot_laws is not None else np.full((1, 3), np.nan)
    check = {k: v for k, v in arm.check.items()}
    check["sentence"] = (
        check.get("why") and f"frontier law not identified: {check['why']}"
    ) or law_check.verdict("frontier law", arm.check)
    return {
        "n_runs": int(arm.n_runs),
        "law": {"A": float(law[0]), "gamma": float(law[1]), "E": float(law[2])},
        "law_ci95": {
            name: percentile_interval(reps[:, j])
            for j, name in enumerate(("A", "gamma", "E"))
            if irreducible or name != "E"
        },
        "law_check": check,
        "n_plateau_cells": int(arm.plateau.sum()),
        "not_identified": [] if arm.law_ok else ["frontier law"],
        "why_not_identified": {} if arm.law_ok else {"frontier law": check["sentence"]},
        "multipliers": rows,
    }


def _holm_verdicts(cells: list[dict], n_boot: int) -> np.ndarray:
    """Holm-adjust the p of every measured row and write each verdict into it."""
    adjusted = holm_adjust(np.array([row["p"] for row in cells]))
    for row, p_holm in zip(cells, adjusted):
        row["p_holm"] = float(p_holm)
        if not np.isfinite(p_holm):
            row["verdict"] = "not identified"
            row["why_not_identified"] = row["why_not_identified"] or (
                "its interval collapsed to the point"
            )
        elif p_holm < FAMILY_LEVEL:
            row["verdict"] = "better" if row["loss_gap"] < 0 else "worse"
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
    """{variant: (m at its budgets (K,), replicates (R, K))}: the same noise model, seed and
    replicates as `compare_variants`, at any budgets (measured ones from measured losses, others
    from the checked laws, nan where they cannot be used), for what is derived from m."""
    ab = _Ablation(runs, baseline, n_boot, seed, irreducible)
    return {v: ab.draws(v, C) for v, C in budgets.items()}
