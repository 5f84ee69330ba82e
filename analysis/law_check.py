"""Is a fitted law a description of the points it was fitted to? Checked before anything is
built on it (an extrapolation, an allocation, a verdict).

Each point's residual (measured - law, nats) is compared with its noise: sigma_i, the runs'
noise scale (`analysis.noise`) divided by sqrt(seeds averaged into the point). A point is outside
when |residual| > z_n sigma_i, z_n the two-sided Bonferroni quantile at 5% over the n points
(2.69 at 7 points, 3.8 at 245): pure seed noise puts any point outside in at most 5% of fits.
The law does not describe the runs when more than MAX_OUTSIDE of its points are outside: with
fewer than 20 points that is any one point; at Chinchilla's 245 points (Besiroglu et al.'s
data, whose Huber fit discounts a few digitised outliers) up to 12. Measured: Besiroglu et
al.'s published law has 5 of those 245 points outside at the default noise scale, so it
describes them; the demo's 2017-block frontier, a plateau then a drop, misses its own points
by up to 0.9 nats.
"""

from __future__ import annotations

import numpy as np
from scipy.stats import norm

LEVEL = 0.05  # probability that seed noise alone puts any point outside
MAX_OUTSIDE = 0.05  # share of points a law may miss (a robust fit discounts a few outliers)


def check(measured, predicted, sigma, labels=None) -> dict:
    """{"describes", "n_points", "n_outside", "z", "worst": {label, measured, law, residual,
    sigma}} of a law's predictions at its points; sigma: scalar or one per point."""
    y = np.asarray(measured, dtype=float)
    f = np.asarray(predicted, dtype=float)
    s = np.broadcast_to(np.asarray(sigma, dtype=float), y.shape)
    ok = np.isfinite(y)
    n = int(ok.sum())
    r = y - f
    z = float(norm.ppf(1 - LEVEL / (2 * max(n, 1))))
    scaled = np.where(ok, np.abs(r) / s, -np.inf)
    scaled = np.where(np.isnan(scaled) & ok, np.inf, scaled)  # a nan prediction misses
    outside = int((scaled > z).sum())
    worst = int(np.argmax(scaled)) if n else None
    labels = list(labels) if labels is not None else [f"point {i}" for i in range(y.size)]
    return {
        "describes": bool(n > 0 and outside <= int(MAX_OUTSIDE * n)),
        "n_points": n,
        "n_outside": outside,
        "z": z,
        "worst": None
        if worst is None
        else {
            "label": str(labels[worst]),
            "measured": float(y[worst]),
            "law": float(f[worst]),
            "residual": float(r[worst]),
            "sigma": float(s[worst]),
        },
    }


def verdict(name: str, result: dict) -> str:
    """One sentence: whether `name` describes its points, with the worst point either way."""
    w = result["worst"]
    if w is None:
        return f"{name}: no points to check."
    where = (
        f"worst at {w['label']}: measured {w['measured']:.3f}, law {w['law']:.3f} "
        f"({w['residual']:+.3f} nats, {abs(w['residual']) / w['sigma']:.1f} x its noise)"
    )
    if result["describes"]:
        return f"{name} describes its {result['n_points']} points within noise ({where})."
    return (
        f"{name} does not describe these runs: {result['n_outside']} of {result['n_points']} "
        f"points off by more than {result['z']:.2g} x their noise; {where}. Nothing is "
        "extrapolated from it."
    )
