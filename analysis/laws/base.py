"""What every scaling-law form shares: its parameters, the fit, the bootstrap, identification.

A form (`Law`) is a prediction log L(theta; N, D, ...) written once in torch, so the fit gets
exact gradients from autograd instead of hand-derived ones for every form. theta holds the
paper's parameters, scale parameters as logs (`log_scale`), so a start grid can span decades.
Every form is fitted the way approach 3 is (`analysis.parametric`): summed Huber loss of log
residuals (delta 1e-3), batched L-BFGS (`analysis.lbfgs`) from every point of a start grid,
L-BFGS-B polish of the best; every bootstrap replicate refitted from the point estimate and a
few grid points. One objective for every form, so a comparison of forms compares the forms.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
import torch
from scipy.optimize import minimize

from analysis import identification
from analysis.lbfgs import chunked, minimize_batched

HUBER_DELTA = 1e-3  # as approach 3 (Hoffmann et al. 2022, appendix D.2)

# log_loss(theta (k, P) tensor, columns {name: (n,) tensor}) -> (k, n) predicted log loss
LogLoss = Callable[[torch.Tensor, dict[str, torch.Tensor]], torch.Tensor]


@dataclass(frozen=True)
class Law:
    name: str
    params: tuple[str, ...]  # the paper's names, in theta order
    log_scale: tuple[bool, ...]  # theta stores log(value) for these
    columns: tuple[str, ...]  # data the law needs besides loss, e.g. ("N", "D", "U")
    log_loss: LogLoss
    grid: dict[str, tuple[float, ...]]  # start grid per parameter, in linear scale
    reference: str
    # identification: exponent name -> sign (the plausible range applies to sign * value),
    # scale -> the exponent it trades off against, and the irreducible loss's name if any
    exponents: dict[str, int] = field(default_factory=dict)
    tradeoffs: dict[str, str] = field(default_factory=dict)
    irreducible: str | None = None
    # (values {name: (R,)}, C (K,), U (K,) or None) -> (N_opt, D_opt), each (R, K)
    optimal: Callable | None = None
    # (law, runs, counts (R, n), fixed) -> (theta (P,), objective, thetas (R, P), converged (R,));
    # None: `fit_and_bootstrap` (every parameter jointly from the start grid)
    fitter: Callable | None = None
    extra_reasons: Callable | None = None  # (runs, point values) -> {name: reason}
    fitted: str = "jointly, every parameter from every point of the start grid"

    @property
    def n_params(self) -> int:
        return len(self.params)

    def to_theta(self, values: dict[str, float]) -> np.ndarray:
        """(P,) theta from {name: value} in linear scale."""
        return np.array(
            [np.log(values[k]) if log else float(values[k])
             for k, log in zip(self.params, self.log_scale)]
        )  # fmt: skip

    def to_values(self, theta: np.ndarray) -> dict[str, np.ndarray]:
        """{name: value(s)} in linear scale from theta (P,) or (R, P)."""
        theta = np.atleast_2d(theta)
        with np.errstate(over="ignore"):  # a fit run off to a boundary: inf, reported
            return {k: np.exp(theta[:, i]) if log else theta[:, i]
                    for i, (k, log) in enumerate(zip(self.params, self.log_scale))}  # fmt: skip

    def starts(self) -> np.ndarray:
        """(S, P) theta of every point of the start grid."""
        axes = [np.log(self.grid[k]) if log else np.asarray(self.grid[k], float)
                for k, log in zip(self.params, self.log_scale)]  # fmt: skip
        return np.array(list(itertools.product(*axes)), dtype=float)

    def predict(self, theta: np.ndarray, columns: dict[str, np.ndarray]) -> np.ndarray:
        """(R, n) predicted loss for theta (P,) or (R, P) at the points `columns`."""
        cols = {k: torch.tensor(np.array(v, dtype=float)) for k, v in columns.items()}
        with torch.no_grad():
            out = self.log_loss(torch.tensor(np.atleast_2d(np.array(theta, dtype=float))), cols)
        return np.exp(out.numpy())


@contextmanager
def one_thread():
    """Torch on one thread while fitting: the objective's arrays are small (rows x points), so
    intra-op threads cost more than they save (5x slower with 2 threads, measured on a 2-core
    machine, 2,000 x 30 rows x points)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def tensors(frame, names) -> dict[str, torch.Tensor]:
    return {k: torch.tensor(frame[k].to_numpy(dtype=float)) for k in names}


def huber_objective(law: Law, columns: dict[str, torch.Tensor], loss, weights=None,
                    delta: float = HUBER_DELTA):
    """fun(x (k, P), rows (k,)) -> (f (k,), grad (k, P)) for `minimize_batched`: the weighted
    sum of Huber losses of log residuals; weights (R, n) indexed by rows (None = all ones)."""
    log_L = torch.log(torch.tensor(np.array(loss, dtype=float)))
    w_all = None if weights is None else torch.tensor(np.array(weights, dtype=float))

    def fun(x: np.ndarray, rows: np.ndarray):
        theta = torch.tensor(x, dtype=torch.float64, requires_grad=True)
        with torch.enable_grad():
            resid = log_L - law.log_loss(theta, columns)  # (k, n)
            clipped = resid.clamp(-delta, delta)
            huber = clipped * (resid - 0.5 * clipped)  # r^2/2 inside [-delta, delta], linear outside
            if w_all is not None:
                huber = huber * (w_all[torch.as_tensor(rows)] if w_all.shape[0] > 1 else w_all)
            f = huber.sum(dim=1)
            f.sum().backward()  # rows are independent: the gradient of the sum is each row's
        return f.detach().numpy(), theta.grad.numpy()

    return fun


@dataclass
class Fit:
    theta: np.ndarray  # (P,)
    objective: float


def fit(law: Law, columns, loss, starts: np.ndarray | None = None, free=None,
        polish: int = 3) -> Fit:
    """Point estimate: batched L-BFGS from every start, L-BFGS-B polish of the `polish` best
    distinct results (as `parametric.fit_parametric`). `free` (P,) bool holds the others at
    their starting values."""
    n = len(np.asarray(loss))
    fun = huber_objective(law, columns, loss)
    starts = law.starts() if starts is None else np.atleast_2d(starts)
    free = np.ones(law.n_params, dtype=bool) if free is None else np.asarray(free, dtype=bool)
    with np.errstate(all="ignore"):  # trial steps may overflow; rejected
        res = minimize_batched(chunked(fun, n), starts, free=free)
    order = np.argsort(np.where(np.isfinite(res.fun), res.fun, np.inf))
    picked: list[np.ndarray] = []
    for x in res.x[order]:
        if np.all(np.isfinite(x)) and all(np.abs(x - p).max() > 1e-3 for p in picked):
            picked.append(x)
        if len(picked) == polish:
            break
    if not picked:
        return Fit(np.full(law.n_params, np.nan), float("nan"))

    def single(x):
        f, g = fun(x[None, :], np.zeros(1, dtype=int))
        return float(f[0]), g[0] * free

    best_x, best_f = picked[0], single(picked[0])[0]
    for x0 in picked:
        bounds = [(None, None) if f else (v, v) for f, v in zip(free, x0)]
        with np.errstate(all="ignore"):
            r = minimize(single, x0, jac=True, method="L-BFGS-B", bounds=bounds,
                         options={"maxiter": 500, "ftol": 1e-13, "gtol": 1e-10})  # fmt: skip
        if np.isfinite(r.fun) and r.fun < best_f:
            best_x, best_f = r.x, float(r.fun)
    return Fit(np.asarray(best_x, dtype=float), best_f)


def bootstrap_starts(law: Law, k: int = 9) -> np.ndarray:
    """k points spread over the start grid (every len(grid)/k-th in its order), so a replicate
    can leave a point estimate stuck on a boundary (see `parametric.bootstrap_starts`)."""
    grid = law.starts()
    return grid[np.linspace(0, len(grid) - 1, min(k, len(grid))).round().astype(int)]


def bootstrap(law: Law, columns, loss, counts: np.ndarray, starts: np.ndarray, free=None,
              screen_iter: int = 40, keep: int = 2) -> tuple[np.ndarray, np.ndarray]:
    """Refit every replicate (counts (R, n)) from its own starts: (S, P) shared by all, or
    (R, S, P) per replicate. Returns thetas (R, P), nan where not converged, and the
    converged flags (R,). Every start runs `screen_iter` iterations, the `keep` best of each
    replicate run to convergence (as `parametric.bootstrap_parametric`)."""
    n_rep = counts.shape[0]
    starts = np.broadcast_to(starts, (n_rep, *starts.shape[-2:]))
    n_start = starts.shape[1]
    free = np.ones(law.n_params, dtype=bool) if free is None else np.asarray(free, dtype=bool)
    fun = huber_objective(law, columns, loss, counts)

    def run(x0, owner, max_iter):
        def batch(x, rows):
            return fun(x, owner[rows])

        with np.errstate(all="ignore"):
            return minimize_batched(chunked(batch, counts.shape[1]), x0, max_iter=max_iter,
                                    free=free)  # fmt: skip

    owner = np.repeat(np.arange(n_rep), n_start)
    screen = run(starts.reshape(-1, starts.shape[-1]).copy(), owner, screen_iter)
    f = np.where(np.isfinite(screen.fun), screen.fun, np.inf).reshape(n_rep, n_start)
    keep = min(keep, n_start)
    best = np.argsort(f, axis=1, kind="stable")[:, :keep]
    rows = (best + n_start * np.arange(n_rep)[:, None]).ravel()
    final = run(screen.x[rows], owner[rows], 500)
    f = np.where(np.isfinite(final.fun), final.fun, np.inf).reshape(n_rep, keep)
    pick = np.argmin(f, axis=1)
    chosen = pick + keep * np.arange(n_rep)
    thetas = final.x[chosen].copy()
    converged = final.converged[chosen] & np.isfinite(f[np.arange(n_rep), pick])
    thetas[~converged] = np.nan
    return thetas, converged


def fit_and_bootstrap(law: Law, runs, counts: np.ndarray, fixed: dict | None = None):
    """The default fitter: every parameter jointly; replicates from the point estimate and
    `bootstrap_starts`."""
    if fixed:
        raise ValueError(f"--law {law.name} cannot hold parameters fixed")
    cols, loss = tensors(runs, law.columns), runs["loss"].to_numpy(float)
    with one_thread():
        point = fit(law, cols, loss)
        starts = np.vstack([point.theta[None, :], bootstrap_starts(law)])
        thetas, converged = bootstrap(law, cols, loss, counts, starts)
    return point.theta, point.objective, thetas, converged


def reasons(law: Law, point: dict, ci: dict, converged: np.ndarray, loss_min: float,
            fixed: dict | None = None) -> dict[str, str]:
    """Identification of every quantity of a form, by approach 3's rules
    (`identification.parametric`): convergence, E on its bound, implausible exponents, scales
    that trade off against an unidentified exponent, collapsed or missing intervals, and
    derived quantities (`name@C`) built from any of those."""
    fixed = fixed or {}
    n_ok, n_all = int(np.sum(converged)), int(np.size(converged))
    if n_all and n_ok < identification.MIN_CONVERGED * n_all:
        failed = f"only {n_ok} of {n_all} bootstrap refits converged"
        return {k: failed for k in point if k not in fixed}
    out: dict[str, str] = {}
    for name in law.params:
        if name in fixed:
            continue
        why = identification._interval(point[name], ci.get(name))
        value = point[name]
        if name == law.irreducible and np.isfinite(value) and value < identification.E_ZERO_FRACTION * loss_min:
            why = (f"{name} = {value:.2g} sits on its lower bound 0 (the runs do not show the "
                   f"loss levelling off); {identification.E_ADVICE}")  # fmt: skip
        elif name in law.exponents:
            shown = f"{'-' if law.exponents[name] < 0 else ''}{name}"
            why = identification.exponent_problem(shown, law.exponents[name] * value) or why
        if why:
            out[name] = why
    for scale, exponent in law.tradeoffs.items():
        if exponent in out and scale not in fixed:
            out[scale] = f"it trades off against {exponent}, which is not identified"
    bad = [k for k in law.params if k in out]
    for name in [k for k in point if k not in law.params]:
        why = identification._interval(point[name], ci.get(name))
        if bad:
            why = f"it depends on {', '.join(bad)}, not identified"
        if why:
            out[name] = why
    return out
