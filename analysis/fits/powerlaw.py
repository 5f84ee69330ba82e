"""Single-variable power laws y = E + A x^-alpha (Kaplan et al. 2020 style), E optional.

Fitted in log space, log y = logsumexp(log A - alpha log x, log E), by least squares on the log
residuals, so every decade of x counts the same. Without the irreducible term the fit is a
straight line in log-log coordinates (closed form). Weights (R, n) fit R bootstrap replicates
in one batched call; x and y may also differ per replicate (R, n) (e.g. a resampled frontier).

Also the allocation exponents of Chinchilla approaches 1 and 2 (`frontier_exponents`): pure
power laws N_opt = k_N C^a and D_opt = k_D C^b through compute-optimal points, fitted alike by
both (`analysis.fits.envelope`, `analysis.fits.isoflop`), so they live below both.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
import pandas as pd

from analysis.fits.bootstrap import intervals
from analysis.fits.lbfgs import chunked, minimize_batched


@dataclass(frozen=True)
class PowerLaw:
    A: float
    alpha: float
    E: float = 0.0  # irreducible term; 0 when fitted without one

    def predict(self, x):
        return self.E + self.A * np.asarray(x, dtype=float) ** -self.alpha

    def inverse(self, y):
        """x at which the law reaches y (nan where y <= E)."""
        y = np.asarray(y, dtype=float)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(y > self.E, ((y - self.E) / self.A) ** (-1.0 / self.alpha), np.nan)

    def as_dict(self) -> dict:
        return {"A": self.A, "alpha": self.alpha, "E": self.E}


def _rows(arr, rows):
    return arr[rows] if arr.shape[0] > 1 else arr


def _objective(theta, rows, log_x, log_y, w):
    """Weighted sum of squared log residuals of y = E + A x^-alpha; theta = (log A, alpha, log E)."""
    log_x, log_y, w = _rows(log_x, rows), _rows(log_y, rows), _rows(w, rows)  # (k|1, n)
    la, alpha, le = (theta[:, i : i + 1] for i in range(3))
    t1 = la - alpha * log_x
    top = np.maximum(t1, le)
    w1, w2 = np.exp(t1 - top), np.exp(le - top)
    total = w1 + w2
    resid = log_y - top - np.log(total)
    f = (w * resid**2).sum(axis=1)
    dpred = -2.0 * w * resid / total
    grad = np.stack([(dpred * w1).sum(1), -(dpred * w1 * log_x).sum(1), (dpred * w2).sum(1)], 1)
    return f, grad


def _linear(log_x, log_y, w):
    """Weighted least squares of log y = log A - alpha log x for each row: (R, 2) (log A, alpha)."""
    sw = w.sum(1)
    with np.errstate(invalid="ignore", divide="ignore"):  # a replicate without points: nan
        mx, my = (w * log_x).sum(1) / sw, (w * log_y).sum(1) / sw
        cov = (w * (log_x - mx[:, None]) * (log_y - my[:, None])).sum(1)
        var = (w * (log_x - mx[:, None]) ** 2).sum(1)
        slope = cov / var
    return np.stack([my - slope * mx, -slope], axis=1)


def fit_power_laws(x, y, *, irreducible: bool, weights=None, x0=None) -> np.ndarray:
    """Fit R laws at once. x, y: (n,) or (R, n); weights (R, n) or None. Returns (R, 3)
    rows of (A, alpha, E), nan where a fit failed."""
    with np.errstate(divide="ignore", invalid="ignore"):  # padding may hold 0: weight 0 below
        log_x = np.log(np.atleast_2d(np.asarray(x, dtype=float)))
        log_y = np.log(np.atleast_2d(np.asarray(y, dtype=float)))
    w = np.ones_like(log_x) if weights is None else np.atleast_2d(np.asarray(weights, float))
    n_fits = max(log_x.shape[0], w.shape[0])
    log_x, log_y = np.broadcast_to(log_x, w.shape).copy(), np.broadcast_to(log_y, w.shape).copy()
    log_x[w == 0], log_y[w == 0] = 0.0, 0.0  # padding of ragged replicates: weight 0, finite
    if not irreducible:
        lin = _linear(log_x, log_y, w)
        with np.errstate(over="ignore", invalid="ignore"):  # a degenerate replicate: inf or nan
            return np.stack([np.exp(lin[:, 0]), lin[:, 1], np.zeros(n_fits)], axis=1)

    def batch(theta, rows):
        return _objective(theta, rows, log_x, log_y, w)

    # A grid of exponents and irreducible fractions of the smallest y, per fit; plus the warm
    # start x0 when given (bootstrap). Every fit keeps its best start: a replicate warm-started
    # alone at an estimate with E -> 0 cannot leave it (no gradient in log E there).
    ymin = np.where(w > 0, log_y, np.inf).min(1)
    grid = list(itertools.product([0.05, 0.1, 0.2, 0.4, 0.8], [0.05, 0.3, 0.6, 0.9]))
    owner = np.repeat(np.arange(n_fits), len(grid))
    alpha = np.tile([g[0] for g in grid], n_fits)
    with np.errstate(invalid="ignore", divide="ignore"):  # a replicate without points: nan starts
        xmid = (w * log_x).sum(1) / w.sum(1)
        le = ymin[owner] + np.log(np.tile([g[1] for g in grid], n_fits))
        # log A so that the power-law term carries the rest of the loss at the middle of x.
        la = np.log(np.maximum(np.exp(ymin[owner]) - np.exp(le), 1e-12)) + alpha * xmid[owner]
    starts = np.stack([la, alpha, le], axis=1)
    if x0 is not None:
        starts = np.vstack([np.repeat(np.atleast_2d(x0), n_fits, axis=0), starts])
        owner = np.concatenate([np.arange(n_fits), owner])

    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        res = minimize_batched(chunked(lambda t, r: batch(t, owner[r]), log_x.shape[1]), starts)
    fun = np.where(res.converged & np.isfinite(res.fun), res.fun, np.inf)
    order = np.lexsort((fun, owner))  # by fit, then objective: each fit's best start first
    best = order[np.searchsorted(owner[order], np.arange(n_fits))]
    out = np.full((n_fits, 3), np.nan)
    ok = np.isfinite(fun[best])
    la, alpha, le = res.x[best[ok]].T
    out[ok] = np.stack([np.exp(la), alpha, np.exp(le)], axis=1)
    return out


def fit_power_law(x, y, *, irreducible: bool = True) -> PowerLaw:
    A, alpha, E = fit_power_laws(x, y, irreducible=irreducible)[0]
    return PowerLaw(A=float(A), alpha=float(alpha), E=float(E))


def theta_of(law: PowerLaw) -> np.ndarray:
    """Warm-start vector (log A, alpha, log E) of a fitted law with an irreducible term."""
    return np.array([np.log(law.A), law.alpha, np.log(max(law.E, 1e-12))])


# ---------------------------------------------------------------- allocation exponents


def _loglog_line(x, y) -> tuple[float, float]:
    """Least-squares exponent and coefficient of y = k x^p."""
    p, log_k = np.polyfit(np.log(x), np.log(y), 1)
    with np.errstate(over="ignore"):  # a degenerate bootstrap replicate may give k = inf
        return float(p), float(np.exp(log_k))


def frontier_exponents(optima: pd.DataFrame) -> dict | None:
    """a, b and coefficients of N_opt = k_N C^a, D_opt = k_D C^b from per-budget optima."""
    n_opt, d_opt = optima["N_opt"].to_numpy(float), optima["D_opt"].to_numpy(float)
    # A nearly flat parabola puts its minimum at exp(huge) = inf: not a point to fit a line to.
    ok = optima[np.isfinite(n_opt) & np.isfinite(d_opt) & (n_opt > 0)]
    if len(ok) < 2 or ok["C"].nunique() < 2:
        return None
    a, k_N = _loglog_line(ok["C"], ok["N_opt"])
    b, k_D = _loglog_line(ok["C"], ok["D_opt"])
    return {"a": a, "b": b, "k_N": k_N, "k_D": k_D, "n_budgets": int(len(ok))}


def exponent_intervals(replicates: list[dict | None]) -> dict:
    """95% intervals of a, b, k_N, k_D over bootstrap replicates' `frontier_exponents` (a
    replicate that gave None counts as no value)."""
    reps: dict[str, list[float]] = {k: [] for k in ("a", "b", "k_N", "k_D")}
    for rep in replicates:
        for k in reps:
            reps[k].append(np.nan if rep is None else rep[k])
    return intervals({k: np.array(v) for k, v in reps.items()})
