"""Efficiency leverage (EL) of mixture-of-experts variants and its law in activation ratio and
compute.

EL(C) of a MoE configuration at active compute C is the dense baseline's compute needed to reach
the MoE's loss at C, divided by C: exactly the ablation's compute multiplier
(`analysis.verdicts.ablation`) of a variant that is a MoE, read from it, never recomputed.
Each configuration is labelled by its activation ratio A = (top_k + n_shared) /
(n_experts + n_shared), the share of its expert parameters a token uses (every expert, shared
ones included, is ffn/G wide, so counts are parameter shares), and its granularity G
(`model.moe_granularity`). A configuration is the pair (A, G) and the MoE layers' placement.

The law (a log-linear form after Tian et al. 2025, "Towards greater leverage", whose EL grows as
a power of 1/A and of C; their granularity term is not fitted here):

    log EL = a + b log(1/A) + c log(C / C0),  C0 the geometric mean of the points' C

fitted by weighted least squares on every measured budget's log EL, sigma = the 95% interval's
width in log / (2 x 1.96). Every configuration's multiplier at one budget reads the same noisy
baseline frontier, so its errors are shared within a budget: b is fitted on the contrasts within
budgets (a free level per budget), then a and c on the budgets' levels, each level as uncertain
as its points; intervals widen by the residual scatter where that exceeds the sigmas (reduced
chi-square > 1, t quantile). Treating the points as independent missed the true c in 2 of the first 3 synthetic sweeps;
this fit's intervals hold a, b, c in 20, 20, 19 of 20 (tests/test_analysis_leverage.py).
Identification: b needs >= 3 distinct activation ratios and a budget holding two of them, c
>= 3 distinct budgets; a term not identified is left out of the fit and reported with its
reason, never as a number. The law is checked against its own points (`analysis.fits.law_check`:
residual vs sigma) before it is stated.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from analysis.fits import law_check

MIN_LEVELS = 3  # distinct values a coefficient needs (three points can reveal a curve)
Z95 = 1.959964
COLUMNS = ("model.n_experts", "model.top_k", "model.n_shared_experts", "model.moe_granularity")


def _value(runs: pd.DataFrame, column: str, default: float) -> float:
    if column not in runs.columns:
        return default
    values = pd.to_numeric(runs[column], errors="coerce").dropna().unique()
    if len(values) > 1:  # a variant's runs share one configuration
        return float("nan")
    return float(values[0]) if len(values) else default


def configurations(runs: pd.DataFrame, baseline: str) -> dict[str, dict]:
    """{variant: {A, G, n_experts, top_k, n_shared, moe_every}} of every MoE variant (one whose
    runs have model.mlp 'moe' or n_experts > 1 with a top_k); {} for dense-only runs."""
    out: dict[str, dict] = {}
    if "variant" not in runs.columns or "model.n_experts" not in runs.columns:
        return out
    for variant, rows in runs.groupby("variant"):
        if variant == baseline:
            continue
        mlp = rows["model.mlp"].astype(str).unique() if "model.mlp" in rows.columns else []
        n_experts = _value(rows, "model.n_experts", float("nan"))
        top_k = _value(rows, "model.top_k", float("nan"))
        is_moe = "moe" in mlp or (math.isfinite(n_experts) and n_experts > 1)
        if not is_moe or not (math.isfinite(n_experts) and math.isfinite(top_k)):
            continue
        shared = _value(rows, "model.n_shared_experts", 0.0)
        shared = 0.0 if not math.isfinite(shared) else shared
        granularity = _value(rows, "model.moe_granularity", 1.0)
        out[str(variant)] = {
            "A": (top_k + shared) / (n_experts + shared),
            "G": granularity,
            "n_experts": n_experts,
            "top_k": top_k,
            "n_shared": shared,
            "moe_every": _value(rows, "model.moe_every", 1.0),
        }
    return out


def points(ablation: dict, configs: dict[str, dict]) -> list[dict]:
    """Every measured budget's EL of every MoE variant with an interval: {variant, A, G, C, EL,
    ci95, verdict, why_not_identified}; an unidentified multiplier stays, with its reason and
    no number the law uses."""
    out = []
    for variant, cfg in configs.items():
        res = ablation["variants"].get(variant)
        if not res:
            continue
        bad = (res.get("why_not_identified") or {}).get("multipliers")
        for m in res["multipliers"]:
            if not m["measured"]:
                continue
            why = bad or m.get("why_not_identified")
            ci = m.get("ci95")
            usable = (
                not why
                and ci
                and np.isfinite(m["multiplier"])
                and m.get("method")
                in (
                    "interpolated",
                    "baseline law",
                )
            )
            usable = bool(usable and all(np.isfinite(ci)) and min(ci) > 0 and ci[1] > ci[0])
            out.append(
                {
                    "variant": variant,
                    "A": cfg["A"],
                    "G": cfg["G"],
                    "C": float(m["C"]),
                    "EL": float(m["multiplier"]) if usable else None,
                    "ci95": list(ci) if usable else None,
                    "verdict": m.get("verdict"),
                    "why_not_identified": None if usable else (why or "no two-sided interval"),
                }
            )
    return out


def _distinct(values, digits: int = 3) -> int:
    return len({float(f"{v:.{digits}g}") for v in values})


def _contrasts(use: list[dict]) -> bool:
    """Whether some budget holds two activation ratios (and a residual is left for b)."""
    by_budget: dict[float, set] = {}
    for p in use:
        by_budget.setdefault(float(f"{p['C']:.3g}"), set()).add(float(f"{p['A']:.3g}"))
    n_levels = len(by_budget)
    return any(len(r) > 1 for r in by_budget.values()) and len(use) > n_levels + 1


def fit_law(pts: list[dict]) -> dict:
    """The law of log EL in log(1/A) and log(C/C0) over the usable points, each coefficient
    with its 95% interval or its reason for not being identified, and the law's check."""
    use = [p for p in pts if p["EL"] is not None]
    n_ratio, n_budget = _distinct([p["A"] for p in use]), _distinct([p["C"] for p in use])
    why: dict[str, str] = {}
    if n_ratio < MIN_LEVELS:
        why["b"] = f"{n_ratio} distinct activation ratio(s) (needs {MIN_LEVELS})"
    elif not _contrasts(use):
        why["b"] = "no budget holds two activation ratios (b is read within budgets)"
    if n_budget < MIN_LEVELS:
        why["c"] = f"{n_budget} distinct budget(s) (needs {MIN_LEVELS})"
    terms = ["a"] + [k for k in ("b", "c") if k not in why]
    out: dict = {
        "form": "log EL = a + b log(1/A) + c log(C/C0)",
        "n_points": len(use),
        "n_ratios": n_ratio,
        "n_budgets": n_budget,
        "ratios": sorted({float(f"{p['A']:.3g}") for p in use}),
        "coefficients": {},
        "ci95": {},
        "not_identified": sorted(why),
        "why_not_identified": why,
        "C0": None,
        "check": None,
    }
    if len(use) <= len(terms):  # no residual left to check the law on
        why["a"] = f"{len(use)} usable point(s) for {len(terms)} coefficient(s) (needs more)"
        out["not_identified"] = sorted(why)
        return out
    A = np.array([p["A"] for p in use])
    C = np.array([p["C"] for p in use])
    y = np.log([p["EL"] for p in use])
    sigma = np.array([(math.log(p["ci95"][1]) - math.log(p["ci95"][0])) / (2 * Z95) for p in use])
    c0 = float(np.exp(np.mean(np.log(C))))
    budget = np.array([float(f"{c:.3g}") for c in C])
    fitted = _two_stage(
        np.log(1 / A), np.log(C / c0), budget, y, sigma, "b" not in why, "c" not in why
    )
    out["C0"] = c0
    for k, (value, lo, hi) in fitted.items():
        out["coefficients"][k] = value
        out["ci95"][k] = [lo, hi]
    y_law = sum(
        out["coefficients"].get(k, 0.0) * x
        for k, x in (("a", 1.0), ("b", np.log(1 / A)), ("c", np.log(C / c0)))
    )
    labels = [f"{p['variant']} at C {p['C']:.3g}" for p in use]
    out["check"] = law_check.check(y, y_law, sigma, labels)
    return out


def leverage(runs: pd.DataFrame, ablation: dict | None) -> dict | None:
    """fit.json's `leverage`: every MoE configuration, its EL per measured budget and the law;
    None where the runs hold no MoE variant or no ablation."""
    if not ablation:
        return None
    configs = configurations(runs, ablation["baseline"])
    if not configs:
        return None
    pts = points(ablation, configs)
    return {
        "baseline": ablation["baseline"],
        "definition": "EL(C) = C_dense(loss of the MoE at active compute C) / C",
        "activation_ratio": "A = (top_k + n_shared) / (n_experts + n_shared)",
        "configurations": configs,
        "points": pts,
        "law": fit_law(pts),
    }


def law_sentence(law: dict) -> str:
    """One sentence: the law with its identified coefficients, or why there is none."""
    why = law["why_not_identified"]
    missing = "; ".join(f"{k}: not identified: {v}" for k, v in why.items())
    if "a" in why:
        return f"No law of EL in A and C: {missing}."
    parts = []
    # without b, a is the configurations' own log EL at C0, not an extrapolation to A = 1
    at = (
        "A = 1"
        if "b" in law["coefficients"]
        else "A = " + ", ".join(f"{r:.3g}" for r in law["ratios"])
    )
    for k, name in (("a", f"a (log EL at C0, {at})"), ("b", "b (1/A)"), ("c", "c (C)")):
        if k in law["coefficients"]:
            lo, hi = law["ci95"][k]
            parts.append(f"{name} = {law['coefficients'][k]:.3g} [{lo:.3g}, {hi:.3g}]")
    check = law["check"]
    fits = (
        f"it describes its {check['n_points']} points within their intervals"
        if check["describes"]
        else f"it misses {check['n_outside']} of its {check['n_points']} points by more than "
        f"{check['z']:.2g} x their interval's sigma, so it is not a law of these runs"
    )
    text = f"{law['form']} (C0 = {law['C0']:.3g}): {', '.join(parts)}; {fits}"
    return text + (f"; {missing}." if missing else ".")


def _wls(X, y, sigma, dof: int):
    """WLS estimate, its standard errors scaled by the residual scatter where that exceeds the
    points' own sigmas (reduced chi-square > 1), and the quantile for a 95% interval."""
    w = 1 / sigma
    beta, *_ = np.linalg.lstsq(X * w[:, None], y * w, rcond=None)
    cov = np.linalg.inv((X * (w**2)[:, None]).T @ X)
    chi2 = float((((y - X @ beta) * w) ** 2).sum())
    from scipy.stats import t  # lazy: scipy ~0.9 s

    scale = max(1.0, chi2 / dof) if dof > 0 else 1.0
    q = float(t.ppf(0.975, dof)) if dof > 0 and scale > 1 else Z95
    return beta, np.sqrt(np.diag(cov) * scale), q


def _two_stage(x_ratio, x_compute, budget, y, sigma, fit_b: bool, fit_c: bool) -> dict:
    """{coefficient: (value, lo, hi)}. Every configuration's multiplier at one budget reads the
    same baseline frontier, so its noise is shared within a budget: b comes from the contrasts
    within budgets (one free level per budget), then a and c from the budgets' levels, so the
    compute trend has as many independent points as there are budgets, not configurations."""
    levels = np.unique(budget)
    dummies = (budget[:, None] == levels[None, :]).astype(float)
    out: dict = {}
    b, se_b = 0.0, 0.0
    if fit_b:
        X = np.column_stack([x_ratio, dummies])
        beta, se, q = _wls(X, y, sigma, len(y) - X.shape[1])
        b, se_b = float(beta[0]), float(se[0])
        out["b"] = (b, b - q * se[0], b + q * se[0])
    rest = y - b * x_ratio
    w = 1 / sigma**2
    z = np.array([np.average(rest[budget == c], weights=w[budget == c]) for c in levels])
    # the shared noise does not average out within a budget: a level is as uncertain as its
    # points (the typical one), not sqrt(n) less
    s = np.array(
        [np.sqrt(np.average(sigma[budget == c] ** 2, weights=w[budget == c])) for c in levels]
    )
    xc = np.array([x_compute[budget == c][0] for c in levels])
    X = np.column_stack([np.ones_like(z), xc]) if fit_c else np.ones((len(z), 1))
    beta, se, q = _wls(X, z, s, len(z) - X.shape[1])
    # a is read at A = 1, a lever arm of the points' mean log(1/A) from them: b's error too
    se_a = math.hypot(se[0], float(np.average(x_ratio, weights=w)) * se_b)
    out["a"] = (float(beta[0]), float(beta[0] - q * se_a), float(beta[0] + q * se_a))
    if fit_c:
        out["c"] = (float(beta[1]), float(beta[1] - q * se[1]), float(beta[1] + q * se[1]))
    return {k: out[k] for k in ("a", "b", "c") if k in out}
