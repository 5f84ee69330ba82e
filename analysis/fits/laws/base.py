"""The one engine every scaling-law form is fitted with: its parameters, the fit, the bootstrap.

A form (`Law`) is a prediction log L(theta; N, D, ...) written once in torch, so the fit gets
exact gradients from autograd instead of hand-derived ones for every form (approach 3,
`analysis.fits.laws.chinchilla`, supplies its own closed-form gradient). theta holds the paper's
parameters, scale parameters as logs (`log_scale`), so a start grid can span decades.
Every form is fitted the same way (Hoffmann et al. 2022, appendix D.2): summed Huber loss of
log residuals (delta 1e-3), batched L-BFGS (`analysis.fits.lbfgs`) from every point of a start
grid, L-BFGS-B polish of the best; every bootstrap replicate refitted from the point estimate
and a few grid points (`bootstrap`). One objective for every form, so a comparison of forms
compares the forms. Identification of the estimates: `analysis.fits.identification.law_reasons`.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from analysis.fits.bootstrap import distinct
from analysis.fits.lbfgs import chunked, minimize_batched

if TYPE_CHECKING:
    import torch

LOG_TINY = float(np.log(np.finfo(float).tiny))  # about -708: exp of it is still positive
HUBER_DELTA = 1e-3  # Hoffmann et al. 2022, appendix D.2
SCREEN_ITER = 40  # bootstrap: iterations every start runs before the best are kept
KEEP = 2  # bootstrap: starts per replicate run to convergence
POLISH = 3  # point estimate: distinct best results re-run with scipy's L-BFGS-B

# log_loss(theta (k, P) tensor, columns {name: (n,) tensor}) -> (k, n) predicted log loss
LogLoss = Callable[["torch.Tensor", dict[str, "torch.Tensor"]], "torch.Tensor"]
# fun(x (k, P), rows (k,)) -> (f (k,), grad (k, P)), as `analysis.fits.lbfgs.minimize_batched` wants
Objective = Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]


@dataclass(frozen=True)
class Law:
    name: str
    params: tuple[str, ...]  # the paper's names, in the order reports list them
    log_scale: tuple[bool, ...]  # per name in `params`: theta stores log(value)
    columns: tuple[str, ...]  # data the law needs besides loss, e.g. ("N", "D", "U")
    log_loss: LogLoss
    grid: dict[str, tuple[float, ...]]  # start grid per parameter, in linear scale
    reference: str
    # identification: exponent name -> sign (the plausible range applies to sign * value),
    # scale -> the exponent it trades off against, and the irreducible loss's name if any
    exponents: dict[str, int] = field(default_factory=dict)
    tradeoffs: dict[str, str] = field(default_factory=dict)
    irreducible: str | None = None
    # effect sizes whose 0 is a law of its own (no such effect): not identified where the
    # estimate or its interval reaches down to 0 (Tissue's annealing gain C)
    effects: tuple[str, ...] = ()
    # (values {name: (R,)}, C (K,), U (K,) or None) -> (N_opt, D_opt), each (R, K)
    optimal: Callable | None = None
    # (law, runs, counts (R, n), fixed) -> (theta (P,), objective, thetas (R, P), converged (R,));
    # None: `fit_and_bootstrap` (every parameter jointly from the start grid)
    fitter: Callable | None = None
    extra_reasons: Callable | None = None  # (runs, point values) -> {name: reason}
    fitted: str = "jointly, every parameter from every point of the start grid"
    theta_order: tuple[str, ...] = ()  # theta's order where it is not `params`'
    # fit.json's section: quantities reported after the parameters (approach 3: "a", "b");
    # whether it names `reference` and `fitted` (approach 3's section predates both keys)
    derived: tuple[str, ...] = ()
    cites: bool = True
    exact_compute: bool = False  # its allocation can be under exact FLOPs (`flops_per_token`)

    @property
    def n_params(self) -> int:
        return len(self.params)

    @property
    def order(self) -> tuple[str, ...]:
        """The names of theta's entries, in order."""
        return self.theta_order or self.params

    def is_log(self, name: str) -> bool:
        return dict(zip(self.params, self.log_scale))[name]

    def to_theta(self, values: dict[str, float]) -> np.ndarray:
        """(P,) theta from {name: value} in linear scale."""
        return np.array(
            [np.log(values[k]) if self.is_log(k) else float(values[k]) for k in self.order]
        )

    def to_values(self, theta: np.ndarray) -> dict[str, np.ndarray]:
        """{name: value(s)} in linear scale, in `params` order, from theta (P,) or (R, P)."""
        theta = np.atleast_2d(theta)
        with np.errstate(over="ignore"):  # a fit run off to a boundary: inf, reported
            return {
                k: np.exp(theta[:, i]) if self.is_log(k) else theta[:, i]
                for k, i in ((k, self.order.index(k)) for k in self.params)
            }

    def take(self, theta: np.ndarray, source: Law) -> np.ndarray:
        """theta (..., P_source) of `source` rearranged to this law's order of the names they
        share (exact: no round trip through linear scale)."""
        return theta[..., [source.order.index(k) for k in self.order if k in source.order]]

    def starts(self) -> np.ndarray:
        """(S, P) theta of every point of the start grid."""
        axes = [
            np.log(self.grid[k]) if self.is_log(k) else np.asarray(self.grid[k], float)
            for k in self.order
        ]
        return np.array(list(itertools.product(*axes)), dtype=float)

    def bootstrap_starts(self, k: int = 9) -> np.ndarray:
        """Starts of every bootstrap replicate besides the point estimate: k points spread
        over the start grid (every len(grid)/k-th in its order), so a replicate can leave a
        point estimate stuck on a boundary (where the gradient in a log scale vanishes)."""
        grid = self.starts()
        return grid[np.linspace(0, len(grid) - 1, min(k, len(grid))).round().astype(int)]

    def settle(self, theta: np.ndarray) -> np.ndarray:
        """The point estimate as the law reports it (and the bootstrap warm-starts from)."""
        return theta

    def quantities(self, thetas: np.ndarray, budgets, U=None, k: float = 1.0, flops=None):
        """Every reported quantity of R parameter vectors (R, P): the parameters (and
        `derived`), then N_opt, D_opt and tokens_per_param at every budget ({name@C: (R,)}).
        Under C = k 6ND (`analysis.data.compute_factor`) the optimum at C is the 6ND optimum at
        C / k: the law is in N and D only. `flops` (exact FLOPs) only where `exact_compute`."""
        out = dict(self.to_values(thetas))
        budgets = np.asarray(budgets, dtype=float)
        with np.errstate(all="ignore"):
            n_opt, d_opt = self.optimal(
                out, budgets / k, None if U is None else np.full(budgets.size, U)
            )
        for j, C in enumerate(budgets):
            out[f"N_opt@{C:.3g}"], out[f"D_opt@{C:.3g}"] = n_opt[:, j], d_opt[:, j]
            out[f"tokens_per_param@{C:.3g}"] = d_opt[:, j] / n_opt[:, j]
        return out

    def point_loss(self, theta: np.ndarray, columns: dict[str, np.ndarray]) -> np.ndarray:
        """(n,) predicted loss of one theta (P,): the residuals identification measures."""
        return self.predict(theta, columns)[0]

    def hold(self, starts: np.ndarray, fixed: dict[str, float] | None):
        """(starts with the `fixed` parameters set, duplicates removed; free (P,) bool):
        parameters held at given values by name, in linear scale, e.g. {"E": 1.7}."""
        free = np.ones(self.n_params, dtype=bool)
        if not fixed:
            return starts, free
        values = np.zeros(self.n_params)
        for name, value in fixed.items():
            if name not in self.params:
                raise ValueError(f"cannot fix '{name}'; choose from {sorted(self.params)}")
            i = self.order.index(name)
            values[i], free[i] = (np.log(value) if self.is_log(name) else value), False
        return np.unique(np.where(free[None, :], starts, values[None, :]), axis=0), free

    def objective(
        self, columns: dict[str, np.ndarray], loss, weights=None, delta: float = HUBER_DELTA
    ) -> Objective:
        """The weighted sum of Huber losses of log residuals, for `minimize_batched`; weights
        (R, n) indexed by rows (None = all ones). Gradients by autograd."""
        import torch  # lazy: ~1.7 s, only once a law is evaluated (a --help stays fast)

        log_L = torch.log(torch.tensor(np.array(loss, dtype=float)))
        w_all = None if weights is None else torch.tensor(np.array(weights, dtype=float))
        cols = {k: torch.tensor(np.asarray(v, dtype=float)) for k, v in columns.items()}

        def fun(x: np.ndarray, rows: np.ndarray):
            theta = torch.tensor(x, dtype=torch.float64, requires_grad=True)
            with torch.enable_grad():
                resid = log_L - self.log_loss(theta, cols)  # (k, n)
                clipped = resid.clamp(-delta, delta)
                huber = clipped * (
                    resid - 0.5 * clipped
                )  # r^2/2 inside [-delta, delta], linear outside
                if w_all is not None:
                    huber = huber * (w_all[torch.as_tensor(rows)] if w_all.shape[0] > 1 else w_all)
                f = huber.sum(dim=1)
                f.sum().backward()  # rows are independent: the gradient of the sum is each row's
            return f.detach().numpy(), theta.grad.numpy()

        return fun

    def predict(self, theta: np.ndarray, columns: dict[str, np.ndarray]) -> np.ndarray:
        """(R, n) predicted loss for theta (P,) or (R, P) at the points `columns`."""
        import torch  # lazy: ~1.7 s, only once a law is evaluated (a --help stays fast)

        cols = {k: torch.tensor(np.array(v, dtype=float)) for k, v in columns.items()}
        with torch.no_grad():
            out = self.log_loss(torch.tensor(np.atleast_2d(np.array(theta, dtype=float))), cols)
        return np.exp(out.numpy())


@contextmanager
def one_thread():
    """Torch on one thread while fitting: the objective's arrays are small (rows x points), so
    intra-op threads cost more than they save (5x slower with 2 threads on 2,000 x 30 rows x
    points)."""
    import torch  # lazy: ~1.7 s, only once a law is evaluated (a --help stays fast)

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def data(runs, law: Law) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """(the law's columns, loss) of a frame of runs, as float arrays."""
    return {k: runs[k].to_numpy(dtype=float) for k in law.columns}, runs["loss"].to_numpy(float)


@dataclass
class Fit:
    theta: np.ndarray  # (P,)
    objective: float


def fit(law: Law, columns, loss, starts: np.ndarray | None = None, free=None) -> Fit:
    """Point estimate: batched L-BFGS from every start (default: the law's grid), L-BFGS-B
    polish of the POLISH best distinct results, lowest objective kept. `free` (P,) bool holds
    the others at their starting values."""
    from scipy.optimize import minimize  # lazy: scipy ~0.9 s, only once a law is fitted

    n = len(np.asarray(loss))
    fun = law.objective(columns, loss)
    starts = law.starts() if starts is None else np.atleast_2d(starts)
    free = np.ones(law.n_params, dtype=bool) if free is None else np.asarray(free, dtype=bool)
    with np.errstate(all="ignore"):  # trial steps may overflow; rejected
        res = minimize_batched(chunked(fun, n), starts, free=free)
    order = np.argsort(np.where(np.isfinite(res.fun), res.fun, np.inf))
    picked = _distinct(res.x[order], POLISH)
    if not picked:
        return Fit(np.full(law.n_params, np.nan), float("nan"))

    def single(x):
        with np.errstate(all="ignore"):
            f, g = fun(x[None, :], np.zeros(1, dtype=int))
        return float(f[0]), g[0] * free

    best_x, best_f = picked[0], single(picked[0])[0]
    for x0 in picked:
        bounds = [(None, None) if f else (v, v) for f, v in zip(free, x0)]
        with np.errstate(all="ignore"):  # trial steps may overflow; rejected
            r = minimize(
                single,
                x0,
                jac=True,
                method="L-BFGS-B",
                bounds=bounds,
                options={"maxiter": 500, "ftol": 1e-13, "gtol": 1e-10},
            )
        if np.isfinite(r.fun) and r.fun < best_f:
            best_x, best_f = r.x, float(r.fun)
    return Fit(np.asarray(best_x, dtype=float), best_f)


def _distinct(xs: np.ndarray, k: int, tol: float = 1e-3) -> list[np.ndarray]:
    """The first k finite rows of xs that differ from every earlier pick by more than tol."""
    picked: list[np.ndarray] = []
    for x in xs:
        if np.all(np.isfinite(x)) and all(np.abs(x - p).max() > tol for p in picked):
            picked.append(x)
            if len(picked) == k:
                break
    return picked


def bootstrap(
    law: Law, columns, loss, counts: np.ndarray, starts: np.ndarray, free=None
) -> tuple[np.ndarray, np.ndarray]:
    """Refit every replicate (counts (R, n)) from its own starts: (S, P) shared by all, or
    (R, S, P) per replicate. Returns thetas (R, P), nan where not converged, and the
    converged flags (R,). Every start runs SCREEN_ITER iterations, the KEEP best of each
    replicate run to convergence. A replicate that drew fewer distinct runs than the free
    parameters (`analysis.fits.bootstrap.distinct`) is not converged, whatever its optimiser says:
    a law through fewer points than parameters fits them exactly in infinitely many ways."""
    n_rep = counts.shape[0]
    starts = np.broadcast_to(starts, (n_rep, *starts.shape[-2:]))
    n_start = starts.shape[1]
    free = np.ones(law.n_params, dtype=bool) if free is None else np.asarray(free, dtype=bool)
    fun = law.objective(columns, loss, counts)

    def run(x0, owner, max_iter):
        def batch(x, rows):
            return fun(x, owner[rows])

        with np.errstate(all="ignore"):  # trial steps may overflow; rejected
            return minimize_batched(
                chunked(batch, counts.shape[1]), x0, max_iter=max_iter, free=free
            )

    owner = np.repeat(np.arange(n_rep), n_start)
    screen = run(starts.reshape(-1, starts.shape[-1]).copy(), owner, SCREEN_ITER)
    f = np.where(np.isfinite(screen.fun), screen.fun, np.inf).reshape(n_rep, n_start)
    keep = min(KEEP, n_start)
    best = np.argsort(f, axis=1, kind="stable")[:, :keep]  # (R, keep) start index per replicate
    rows = (best + n_start * np.arange(n_rep)[:, None]).ravel()
    final = run(screen.x[rows], owner[rows], 500)
    f = np.where(np.isfinite(final.fun), final.fun, np.inf).reshape(n_rep, keep)
    pick = np.argmin(f, axis=1)
    chosen = pick + keep * np.arange(n_rep)
    thetas = final.x[chosen].copy()
    converged = final.converged[chosen] & np.isfinite(f[np.arange(n_rep), pick])
    converged &= distinct(counts) >= free.sum()  # fewer points than parameters: not determined
    thetas[~converged] = np.nan
    return thetas, converged


def fit_and_bootstrap(law: Law, runs, counts: np.ndarray, fixed: dict | None = None):
    """The default fitter: every free parameter jointly from the law's start grid; each
    replicate from the point estimate and `law.bootstrap_starts()`. Returns (Fit, thetas
    (R, P), converged (R,))."""
    columns, loss = data(runs, law)
    starts, free = law.hold(law.starts(), fixed)
    with one_thread():
        point = fit(law, columns, loss, starts, free)
        more, _ = law.hold(law.bootstrap_starts(), fixed)
        # a log-scale parameter that underflowed to 0 (log = -inf) is a start no line search
        # can leave: the smallest finite log instead, the same point for every purpose
        settled = law.settle(point.theta)
        warm = np.where(np.isneginf(settled), LOG_TINY, settled)
        starts = np.vstack([warm[None, :], more])
        thetas, converged = bootstrap(law, columns, loss, counts, starts, free)
    return point, thetas, converged
