"""Approach 3 of Hoffmann et al. (2022): L(N, D) = E + A / N^alpha + B / D^beta, its fit, its
bootstrap intervals and the compute-optimal allocation it implies (under C = 6ND, or exact
FLOPs with `FlopsPerToken`); the `chinchilla` entry of the `analysis.fits.laws` registry.

The fit follows Hoffmann et al. (2022, appendix D.2) as replicated by Besiroglu et al. (2024,
"Chinchilla Scaling: A replication attempt"): parameters theta = (a, b, e, alpha, beta) with
A = exp(a), B = exp(b), E = exp(e); prediction log L = logsumexp(a - alpha log N, b - beta log D, e);
objective = SUM over runs of Huber_delta(log L_obs - prediction) with delta = 1e-3; L-BFGS from
every point of Hoffmann's grid, best kept (`analysis.fits.laws.base.fit`, the engine of every law).
Each bootstrap replicate finds its own optimum, from the point estimate and 9 points of the
grid (`BOOTSTRAP_STARTS`, `analysis.fits.laws.base.bootstrap`). Tight tolerances: Epoch's
replication found the original fit's tiny intervals came from a too-early stop of the
optimizer. Every quantity is either given an interval or listed as not identified
(`analysis.fits.identification.law_reasons`). Approaches 1 and 2 are in `analysis.fits.envelope` and
`analysis.fits.isoflop`.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from analysis.fits.laws.base import HUBER_DELTA, Law
from analysis.fits.laws.base import fit as fit_law

if TYPE_CHECKING:
    import torch

THETA = ("A", "B", "E", "alpha", "beta")  # theta = (log A, log B, log E, alpha, beta)
# Hoffmann et al.'s starting grid in theta's scale: 6 * 6 * 5 * 5 * 5 = 4,500 points.
HOFFMANN_GRID = {
    "a": np.arange(0.0, 30.0, 5.0),
    "b": np.arange(0.0, 30.0, 5.0),
    "e": np.arange(-1.0, 1.5, 0.5),
    "alpha": np.arange(0.0, 2.5, 0.5),
    "beta": np.arange(0.0, 2.5, 0.5),
}


def hoffmann_grid() -> np.ndarray:
    """(4500, 5) starting points in theta's order."""
    return np.array(list(itertools.product(*HOFFMANN_GRID.values())), dtype=float)


# Starts of every bootstrap replicate besides the warm start at the point estimate: 9 points of
# Hoffmann's grid (a, b in {0, 10, 20}; e = 0.5; alpha = beta = 0.5). A warm start on a boundary
# (E -> 0, where the gradient in log E vanishes) cannot leave it, so without them every replicate
# would copy the estimate and the interval collapse. Measured on results/ref_ladder_v2 (40
# replicates, against a restart of each from the full grid): the warm start alone missed the
# replicate's best objective in 58% of them, warm + these 9 in none.
BOOTSTRAP_STARTS = np.array(
    [[a, b, 0.5, 0.5, 0.5] for a in (0.0, 10.0, 20.0) for b in (0.0, 10.0, 20.0)]
)


@dataclass(frozen=True)
class Parametric:
    """L(N, D) = E + A / N^alpha + B / D^beta."""

    E: float
    A: float
    B: float
    alpha: float
    beta: float
    n_points: int = 0
    objective: float = float("nan")

    @classmethod
    def from_theta(cls, theta, n_points=0, objective=float("nan")) -> Parametric:
        a, b, e, alpha, beta = (float(v) for v in theta)
        with np.errstate(over="ignore"):  # a fit run off to a boundary: A or B is inf, reported
            return cls(np.exp(e), np.exp(a), np.exp(b), alpha, beta, n_points, float(objective))

    @property
    def theta(self) -> np.ndarray:
        with np.errstate(divide="ignore"):  # E on its bound 0: log E = -inf, reported as such
            return np.array([np.log(self.A), np.log(self.B), np.log(self.E), self.alpha, self.beta])

    def predict(self, N, D):
        N, D = np.asarray(N, dtype=float), np.asarray(D, dtype=float)
        with np.errstate(over="ignore", invalid="ignore"):  # such a fit predicts nan, reported
            return self.E + self.A / N**self.alpha + self.B / D**self.beta

    @property
    def a(self) -> float:
        """N_opt exponent: N_opt proportional to C^a."""
        return self.beta / (self.alpha + self.beta)

    @property
    def b(self) -> float:
        """D_opt exponent: D_opt proportional to C^b."""
        return self.alpha / (self.alpha + self.beta)

    def optimal(self, C, k: float = 1.0):
        """(N_opt, D_opt) minimising L under k 6ND = C."""
        q = allocation(self.theta[None, :], np.atleast_1d(np.asarray(C, dtype=float)), k)
        return q["N_opt"][0], q["D_opt"][0]


def allocation(theta: np.ndarray, budgets: np.ndarray, k: float = 1.0) -> dict[str, np.ndarray]:
    """Compute-optimal allocation for R parameter vectors (R, 5) at K budgets: arrays (R, K).

    Minimising A N^-alpha + B D^-beta subject to k 6ND = C gives
    N_opt = G (C/6k)^a, D_opt = G^-1 (C/6k)^b, G = (alpha A / (beta B))^(1 / (alpha + beta));
    k = 1 but for a family whose C is not 6ND (`analysis.data.compute_factor`).
    """
    log_A, log_B, _, alpha, beta = (theta[:, i : i + 1] for i in range(5))  # (R, 1) each
    total = alpha + beta
    # a replicate with an exponent <= 0 (or nan) has no optimum: nan, flagged by identification
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        log_G = (np.log(alpha) + log_A - np.log(beta) - log_B) / total
        log_half = np.log(np.asarray(budgets, dtype=float) / (6.0 * k))[None, :]  # (1, K)
        log_N = log_G + (beta / total) * log_half
        log_D = -log_G + (alpha / total) * log_half
        return {
            "N_opt": np.exp(log_N),
            "D_opt": np.exp(log_D),
            "tokens_per_param": np.exp(log_D - log_N),
        }


@dataclass(frozen=True)
class FlopsPerToken:
    """Exact training FLOPs per token as a function of N: f(N) = 6 k N + c N^q.

    Fitted to the runs' exact counts (C_exact / D): 6 k N is the non-embedding matmuls (k = 1
    but for an encoder-decoder, whose tokens each pass one stack: `analysis.data.compute_factor`),
    c N^q the head, embedding-side and attention terms, which grow slower than N along a size
    ladder. The form tends to 6 k N at large N, so extrapolated allocations approach the 6ND ones.
    """

    c: float
    q: float
    k: float = 1.0

    @classmethod
    def fit(cls, N, C_exact, D, k: float = 1.0) -> FlopsPerToken:
        N, per_token = np.asarray(N, dtype=float), np.asarray(C_exact, float) / np.asarray(D, float)
        extra = per_token - 6 * k * N
        if not (extra > 0).all() or np.unique(N).size < 2:
            raise ValueError("exact FLOPs per token must exceed 6kN at two or more sizes")
        q, log_c = np.polyfit(np.log(N), np.log(extra), 1)
        return cls(float(np.exp(log_c)), float(q), k)

    def __call__(self, N):
        N = np.asarray(N, dtype=float)
        return 6 * self.k * N + self.c * N**self.q


def allocation_exact(theta: np.ndarray, budgets, flops: FlopsPerToken) -> dict[str, np.ndarray]:
    """Compute-optimal allocation under C = f(N) D (exact FLOPs): arrays (R, K).

    No closed form: L(N, C / f(N)) is minimised over a grid of log N (6ND optimum +- 6 decades,
    1,201 points) and refined by a parabola through the best grid point and its neighbours.
    """
    budgets = np.asarray(budgets, dtype=float)
    centre = np.log(allocation(theta, budgets, flops.k)["N_opt"])  # (R, K)
    centre = np.where(np.isfinite(centre), centre, np.nan)
    steps = np.linspace(-6 * np.log(10), 6 * np.log(10), 1201)
    h = steps[1] - steps[0]
    log_n = centre[..., None] + steps  # (R, K, G)
    E, A, B = (np.exp(theta[:, i])[:, None, None] for i in (2, 0, 1))
    alpha, beta = theta[:, 3][:, None, None], theta[:, 4][:, None, None]
    with np.errstate(all="ignore"):
        log_d = np.log(budgets)[None, :, None] - np.log(flops(np.exp(log_n)))
        loss = E + A * np.exp(-alpha * log_n) + B * np.exp(-beta * log_d)
        loss = np.where(np.isfinite(loss), loss, np.inf)
        k = np.clip(np.argmin(loss, axis=-1), 1, steps.size - 2)[..., None]
        y0, y1, y2 = (np.take_along_axis(loss, k + j, axis=-1)[..., 0] for j in (-1, 0, 1))
        shift = np.clip(0.5 * (y0 - y2) / (y0 - 2 * y1 + y2), -1, 1)
        shift = np.where(np.isfinite(shift), shift, 0.0)
        best = np.take_along_axis(log_n, k, axis=-1)[..., 0] + h * shift
        n_opt = np.exp(best)
        d_opt = budgets[None, :] / flops(n_opt)
    n_opt = np.where(np.isfinite(centre), n_opt, np.nan)
    return {"N_opt": n_opt, "D_opt": d_opt, "tokens_per_param": d_opt / n_opt}


def quantities(
    theta: np.ndarray, budgets, flops: FlopsPerToken | None = None, k: float = 1.0
) -> dict[str, np.ndarray]:
    """Every reported quantity for R parameter vectors (R, 5): {name: (R,)}. With `flops`, the
    allocation is under exact FLOPs (C = f(N) D), else under C = k 6ND."""
    with np.errstate(all="ignore"):
        out = {
            "E": np.exp(theta[:, 2]),
            "A": np.exp(theta[:, 0]),
            "B": np.exp(theta[:, 1]),
            "alpha": theta[:, 3],
            "beta": theta[:, 4],
            "a": theta[:, 4] / (theta[:, 3] + theta[:, 4]),
            "b": theta[:, 3] / (theta[:, 3] + theta[:, 4]),
        }
        budgets = np.asarray(budgets, dtype=float)
        alloc = (
            allocation(theta, budgets, k)
            if flops is None
            else allocation_exact(theta, budgets, flops)
        )
    for k, C in enumerate(budgets):
        for name, values in alloc.items():
            out[f"{name}@{C:.3g}"] = values[:, k]
    return out


# ---------------------------------------------------------------- the form and its fit


def huber_objective(theta, rows, log_N, log_D, log_L, weights, delta=HUBER_DELTA):
    """Weighted sum of Huber losses of log residuals and its gradient, for k parameter rows.

    theta (k, 5); rows (k,) index `weights` (R, n) (R = 1 broadcasts; None = all ones);
    log_* (n,). Returns f (k,), grad (k, 5). No max-shift inside the log-sum-exp: starts and
    iterates keep every term below e^700 in practice, and an overflowing trial step gives a
    non-finite f that the line search rejects.
    """
    a, b, e, alpha, beta = (theta[:, i : i + 1] for i in range(5))  # (k, 1) each
    w1 = np.exp(a - alpha * log_N)  # (k, n): A / N^alpha
    w2 = np.exp(b - beta * log_D)  # B / D^beta
    w3 = np.exp(e)  # (k, 1): E
    total = w1 + w2 + w3  # predicted loss
    resid = log_L - np.log(total)  # (k, n)
    clipped = np.clip(resid, -delta, delta)
    huber = clipped * (resid - 0.5 * clipped)  # r^2/2 inside [-delta, delta], linear outside
    # d huber / d pred = -clip(r); d pred / d log(term j) = term_j / total.
    dpred = clipped / total  # (k, n), sign flipped below
    if weights is not None:
        w = weights[rows] if weights.shape[0] > 1 else weights  # (k|1, n)
        huber, dpred = w * huber, w * dpred
    g1, g2 = dpred * w1, dpred * w2
    grad = -np.stack(
        [g1.sum(1), g2.sum(1), w3[:, 0] * dpred.sum(1), -(g1 @ log_N), -(g2 @ log_D)], axis=1
    )
    return huber.sum(axis=1), grad


def log_loss(theta: torch.Tensor, cols: dict[str, torch.Tensor]) -> torch.Tensor:
    """The form in torch, for predictions alongside the other laws."""
    import torch  # lazy: ~1.7 s, only when a law is evaluated (--help stays fast)

    log_A, log_B, log_E, alpha, beta = (theta[:, i : i + 1] for i in range(5))
    terms = torch.broadcast_tensors(
        log_E, log_A - alpha * torch.log(cols["N"]), log_B - beta * torch.log(cols["D"])
    )
    return torch.logsumexp(torch.stack(terms), dim=0)


def optimal(values: dict[str, np.ndarray], C: np.ndarray, U=None):
    theta = np.column_stack(
        [
            np.log(values["A"]),
            np.log(values["B"]),
            np.log(values["E"]),
            values["alpha"],
            values["beta"],
        ]
    )
    q = allocation(theta, C)
    return q["N_opt"], q["D_opt"]


@dataclass(frozen=True)
class Chinchilla(Law):
    """Hoffmann's start grid, its bootstrap starts and the closed-form gradient."""

    def starts(self) -> np.ndarray:
        return hoffmann_grid()

    def bootstrap_starts(self, k: int = 9) -> np.ndarray:
        return BOOTSTRAP_STARTS

    def settle(self, theta: np.ndarray) -> np.ndarray:
        """A, B, E as reported, in linear scale (an E that underflowed to 0 gives log E = -inf,
        flagged by identification)."""
        with np.errstate(divide="ignore"):
            return self.to_theta({k: v[0] for k, v in self.to_values(theta).items()})

    def objective(self, columns, loss, weights=None, delta: float = HUBER_DELTA):
        log_N, log_D, log_L = (
            np.log(np.asarray(v, dtype=float)) for v in (columns["N"], columns["D"], loss)
        )

        def fun(x, rows):
            return huber_objective(x, rows, log_N, log_D, log_L, weights, delta)

        return fun

    def quantities(self, thetas, budgets, U=None, k: float = 1.0, flops=None):
        """From theta itself (no round trip through linear scale); a and b; the allocation
        under exact FLOPs with `flops` (`quantities`)."""
        return quantities(np.atleast_2d(thetas), budgets, flops, k)

    def point_loss(self, theta, columns):
        return Parametric.from_theta(theta).predict(columns["N"], columns["D"])


LAW = Chinchilla(
    name="chinchilla",
    params=("E", "A", "B", "alpha", "beta"),
    log_scale=(True, True, True, False, False),
    columns=("N", "D"),
    log_loss=log_loss,
    grid={},  # Hoffmann's grid: `hoffmann_grid`
    reference="Hoffmann et al. 2022, approach 3",
    exponents={"alpha": 1, "beta": 1},
    tradeoffs={"A": "alpha", "B": "beta"},
    irreducible="E",
    optimal=optimal,
    fitted="jointly from Hoffmann's 4,500-point grid (analysis.fits.laws.chinchilla)",
    theta_order=THETA,
    derived=("a", "b"),
    cites=False,
    exact_compute=True,
)


def fit(
    N, D, loss, *, starts: np.ndarray | None = None, fixed: dict[str, float] | None = None
) -> Parametric:
    """Approach 3 point estimate from `starts` (S, 5) (default: Hoffmann's grid); `fixed` holds
    named parameters at given values (e.g. {"E": 1.7}): they are not fitted."""
    starts, free = LAW.hold(hoffmann_grid() if starts is None else np.atleast_2d(starts), fixed)
    point = fit_law(LAW, {"N": N, "D": D}, np.asarray(loss, dtype=float), starts, free)
    return Parametric.from_theta(point.theta, n_points=np.size(loss), objective=point.objective)
