"""Batched L-BFGS: minimise S independent smooth objectives at once in numpy.

Why: approach 3 starts L-BFGS from Hoffmann's 4,500-point grid and refits every bootstrap
replicate. One scipy `minimize` call costs ~40 ms on 300 points (python overhead per
evaluation, ~60 iterations), so the grid alone would take minutes. Here every start is a row of
one (S, P) array: one numpy pass evaluates all of them, and each row keeps its own curvature
history, step length and convergence flag, exactly as S separate L-BFGS runs would.

`fun(X, rows) -> (f (k,), g (k, P))` evaluates the objectives of the rows `rows` (indices into
the batch) at parameters `X` (k, P); rows let per-start data (bootstrap weights) follow the
start they belong to.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

Objective = Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]


# Why each row stopped (BatchResult.status).
GTOL, FTOL, LINE_SEARCH_FAILED, MAX_ITER, NOT_FINITE = (
    "gtol",
    "ftol",
    "line_search_failed",
    "max_iter",
    "not_finite",
)


@dataclass
class BatchResult:
    x: np.ndarray  # (S, P) final parameters
    fun: np.ndarray  # (S,) final objective values
    n_iter: np.ndarray  # (S,) iterations used
    converged: np.ndarray  # (S,) bool: a tolerance was met (see `status`)
    status: np.ndarray  # (S,) why the row stopped: GTOL, FTOL, LINE_SEARCH_FAILED, ...


@dataclass(frozen=True)
class Settings:
    """L-BFGS knobs shared by every row: curvature pairs kept, tolerances, backtracking."""

    history: int = 10
    ftol: float = 1e-12  # relative change of the objective that counts as converged
    gtol: float = 1e-10  # max-abs gradient that counts as converged
    max_backtracks: int = 30
    stall_gtol: float = 1e-6  # a failed line search at this gradient is a numerical minimum


@dataclass
class _State:
    """Every row's iterate, objective, gradient, curvature history and flags."""

    x: np.ndarray
    f: np.ndarray
    g: np.ndarray
    s_hist: np.ndarray  # steps x_{k+1} - x_k, ring buffer (S, history, P)
    y_hist: np.ndarray  # gradient changes
    rho: np.ndarray  # 1 / (s . y); 0 marks an empty slot
    n_iter: np.ndarray
    active: np.ndarray
    converged: np.ndarray
    status: np.ndarray


def minimize_batched(
    fun: Objective,
    x0: np.ndarray,
    *,
    max_iter: int = 500,
    free: np.ndarray | None = None,
    settings: Settings = Settings(),
) -> BatchResult:
    """L-BFGS with Armijo backtracking, independently per row of `x0` (S, P).

    A row is converged when its gradient (max-abs) falls below `gtol` or its objective stops
    changing (`ftol`, relative). A line search that finds no decrease stops the row; it counts
    as converged only where the gradient is already below `stall_gtol` (a numerical minimum:
    rounding, not a bad direction, defeats the search), else it is reported as not converged.
    `free` (P,) bool keeps the parameters marked False at their starting values (fixed).
    """
    if free is not None:  # a zero gradient component never moves its parameter
        mask = np.asarray(free, dtype=float)
        inner = fun

        def fun(x, rows):
            f, g = inner(x, rows)
            return f, g * mask

    st = _start(fun, x0, settings)
    for it in range(max_iter):
        rows = np.flatnonzero(st.active)
        if rows.size == 0:
            break
        _iterate(fun, st, rows, it, settings)
    return BatchResult(x=st.x, fun=st.f, n_iter=st.n_iter, converged=st.converged, status=st.status)


def _start(fun: Objective, x0: np.ndarray, settings: Settings) -> _State:
    x = np.array(x0, dtype=float, copy=True)
    n_starts, n_par = x.shape
    f, g = fun(x, np.arange(n_starts))
    active = np.isfinite(f) & (np.abs(g).max(axis=1) > settings.gtol)
    converged = ~active & np.isfinite(f)
    status = np.full(n_starts, MAX_ITER, dtype=object)
    status[converged] = GTOL
    status[~np.isfinite(f)] = NOT_FINITE
    return _State(
        x,
        f,
        g,
        np.zeros((n_starts, settings.history, n_par)),
        np.zeros((n_starts, settings.history, n_par)),
        np.zeros((n_starts, settings.history)),
        np.zeros(n_starts, dtype=int),
        active,
        converged,
        status,
    )


def _iterate(fun: Objective, st: _State, rows: np.ndarray, it: int, settings: Settings) -> None:
    """One L-BFGS step of the active `rows`, in place."""
    history = settings.history
    g = st.g
    p = -_two_loop(g[rows], st.s_hist[rows], st.y_hist[rows], st.rho[rows], (it - 1) % history)
    slope = np.einsum("kp,kp->k", p, g[rows])
    bad = ~(slope < 0)  # not a descent direction: fall back to steepest descent
    p[bad] = -g[rows][bad]
    slope[bad] = -np.einsum("kp,kp->k", g[rows][bad], g[rows][bad])
    # First iteration has no curvature information: take a step of unit length.
    step = np.where(
        st.rho[rows].any(axis=1), 1.0, 1.0 / np.maximum(np.linalg.norm(p, axis=1), 1e-12)
    )
    x_new, f_new, g_new = _line_search(fun, st, rows, p, slope, step, settings.max_backtracks)

    moved = np.isfinite(f_new)
    stalled = rows[~moved]  # line search failed: no decrease along the direction
    st.active[stalled] = False
    st.converged[stalled] = np.abs(g[stalled]).max(axis=1) <= settings.stall_gtol
    st.status[stalled] = LINE_SEARCH_FAILED
    rows, x_new, f_new, g_new = rows[moved], x_new[moved], f_new[moved], g_new[moved]

    s = x_new - st.x[rows]
    y = g_new - g[rows]
    sy = np.einsum("kp,kp->k", s, y)
    slot = it % history
    keep = sy > 1e-20  # skip updates that would break positive definiteness
    st.s_hist[rows[keep], slot] = s[keep]
    st.y_hist[rows[keep], slot] = y[keep]
    st.rho[rows[keep], slot] = 1.0 / sy[keep]
    st.rho[rows[~keep], slot] = 0.0

    f_change = np.abs(st.f[rows] - f_new)
    st.x[rows], st.f[rows], g[rows] = x_new, f_new, g_new
    st.n_iter[rows] += 1
    small_g = np.abs(g_new).max(axis=1) <= settings.gtol
    small_f = f_change <= settings.ftol * np.maximum(np.abs(f_new), 1.0)
    stop = small_g | small_f
    st.active[rows[stop]] = False
    st.converged[rows[stop]] = True
    st.status[rows[small_f]] = FTOL
    st.status[rows[small_g]] = GTOL


def _line_search(fun: Objective, st: _State, rows, p, slope, step, max_backtracks: int):
    """Armijo backtracking along p from every row: (x, f, g) at the accepted step, f = inf
    where none was found."""
    x, f = st.x, st.f
    x_new, f_new, g_new = x[rows].copy(), np.full(rows.size, np.inf), st.g[rows].copy()
    todo = np.arange(rows.size)
    for _ in range(max_backtracks):
        trial = x[rows[todo]] + step[todo, None] * p[todo]
        ft, gt = fun(trial, rows[todo])
        ok = np.isfinite(ft) & (ft <= f[rows[todo]] + 1e-4 * step[todo] * slope[todo])
        done = todo[ok]
        x_new[done], f_new[done], g_new[done] = trial[ok], ft[ok], gt[ok]
        todo = todo[~ok]
        if todo.size == 0:
            break
        step[todo] *= 0.5
    return x_new, f_new, g_new


def _two_loop(g, s_hist, y_hist, rho, newest):
    """L-BFGS two-loop recursion for k rows at once: returns H g, (k, P)."""
    history = s_hist.shape[1]
    order = [(newest - i) % history for i in range(history)]  # newest first
    q = g.copy()
    alpha = np.zeros((g.shape[0], history))
    for j in order:
        alpha[:, j] = rho[:, j] * np.einsum("kp,kp->k", s_hist[:, j], q)
        q -= alpha[:, j, None] * y_hist[:, j]
    # Initial Hessian scale gamma = s.y / y.y from the newest valid pair (1 when none).
    gamma = np.ones(g.shape[0])
    for j in reversed(order):  # oldest first, so the newest valid pair wins
        yy = np.einsum("kp,kp->k", y_hist[:, j], y_hist[:, j])
        valid = (rho[:, j] > 0) & (yy > 0)
        gamma[valid] = 1.0 / (rho[valid, j] * yy[valid])
    r = gamma[:, None] * q
    for j in reversed(order):
        beta = rho[:, j] * np.einsum("kp,kp->k", y_hist[:, j], r)
        r += (alpha[:, j] - beta)[:, None] * s_hist[:, j]
    return r


def chunked(fun: Objective, n_points: int, max_elements: int = 1 << 16) -> Objective:
    """Evaluate `fun` over blocks of rows of at most `max_elements` (rows x points) each.

    Why: (rows, points) temporaries that fit in cache make the objective about twice as fast
    as one pass over a 4,500 x 300 array (measured on a 2-core machine).
    """
    block = max(1, max_elements // max(n_points, 1))

    def fun_blocks(x: np.ndarray, rows: np.ndarray):
        if rows.size <= block:
            return fun(x, rows)
        parts = [fun(x[i : i + block], rows[i : i + block]) for i in range(0, rows.size, block)]
        return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])

    return fun_blocks
