"""Is a fitted law a description of the points it was fitted to? Checked before anything is
built on it (an extrapolation, an allocation, a verdict).

Each point's residual (measured - law, nats) is compared with its noise: sigma_i, the runs'
noise scale (`analysis.verdicts.noise`) divided by sqrt(seeds averaged into the point). A point is outside
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
    from scipy.stats import norm  # lazy: scipy ~0.9 s; a --help needs none

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
        but = f" but {result['n_outside']}" if result["n_outside"] else ""
        return f"{name} describes its {result['n_points']} points within noise{but} ({where})."
    return (
        f"{name} does not describe these runs: {result['n_outside']} of {result['n_points']} "
        f"points off by more than {result['z']:.2g} x their noise; {where}. Nothing is "
        "extrapolated from it."
    )


def _flag(section: dict, keys, why: str) -> None:
    """Mark `keys` of a fit.json section not identified with `why` (earlier reasons stay)."""
    missing = section.setdefault("not_identified", [])
    reasons = section.setdefault("why_not_identified", {})
    for k in keys:
        if k not in missing:
            missing.append(k)
        reasons.setdefault(k, why)


def check_baseline_fits(fits, runs, sigma: float) -> None:
    """Check approach 3 against every run it was fitted to and Kaplan's L(N), L(D), L(C)
    against their points; a law that does not describe them has its allocation (approach 3)
    or exponent marked not identified, with the worst point. Writes `law_check` into each
    section of `fits` (an `analysis.fits.fit.Fits`). Approach 1's exponent is a line through the
    frontier's (C, N), approach 2's through parabola minima: no loss residual to check; their
    own rules (a fixed-ratio design, too few replicates) say when they are set by the design
    or not identified."""
    p = fits.parametric
    if fits.law is not None and p.get("law") == "chinchilla":
        pred = fits.law.predict(runs["N"], runs["D"])
        labels = [f"N {n:.3g}, D {d:.3g}" for n, d in zip(runs["N"], runs["D"])]
        result = check(runs["loss"], pred, sigma, labels)
        p["law_check"] = {**result, "sentence": verdict("approach 3", result)}
        if not result["describes"]:
            derived = ["a", "b"] + [
                f"{q}@{r['C']:.3g}"
                for r in p.get("allocation", [])
                for q in ("N_opt", "D_opt", "tokens_per_param")
            ]
            _flag(p, derived, "approach 3 does not describe these runs (see its check)")
    for key, var, name in KAPLAN:
        law = (fits.kaplan or {}).get(key)
        if not isinstance(law, dict) or not law.get("points"):
            continue
        x = np.array([pt["x"] for pt in law["points"]], dtype=float)
        y = np.array([pt["y"] for pt in law["points"]], dtype=float)
        pred = law.get("E", 0.0) + law["A"] * x ** -law["alpha"]
        result = check(y, pred, sigma, [f"{var} = {v:.3g}" for v in x])
        law["law_check"] = {**result, "sentence": verdict(name, result)}
        if not result["describes"]:
            _flag(law, ["alpha"], f"{key} does not describe its points (see its check)")


# Kaplan's single-variable laws in fit.json: (section, its variable, its name in a sentence)
KAPLAN = (
    ("L_N", "N", "the law L(N)"),
    ("L_D", "D", "the law L(D)"),
    ("L_C", "C", "the frontier law L(C)"),
)
