"""Hyperparameter laws: the optimal lr and batch size as power laws of the budget.

From a tuned sweep (`analysis.tuning.arms`) whose keys include the learning rate and/or the batch
size in tokens (`train.lr`, `train.batch_tokens`), every cell (arm: variant x size x token
budget) gives its optimum and near-optimal region (`analysis.tuning.hparam_surface`). The cells whose
optimum is identified for a key are fitted, by least squares in log space with 95% bootstrap
intervals resampling cells, in the forms the field uses:

- DeepSeek LLM (Bi et al. 2024, sec. 3.1): lr_opt = a C^b and B_opt = c C^d, one variable.
  Their C is M D with M the non-embedding FLOPs per token; here C = k 6 N D as every C of
  fit.json (`analysis.data.compute_factor`), N non-embedding.
- Step Law (Li et al. 2025, arXiv 2503.04715): lr_opt = a N^alpha D^beta and B_opt = c D^gamma
  (batch from D alone; Power Lines, arXiv 2505.13738, also finds B_opt a power law in D,
  independent of N). B_opt in (N, D) is fitted too, to show whether N matters here.

Each law says what it does not identify (`identification.lr_rule`, `identification.plane_rule`,
`identification.compute_rule`: too few cells, one value of a variable, N and D collinear, an
exponent interval wider than 1, a law in C whose optima all sit at one D or one N);
cells whose optimum sits on the grid's edge, on a flat surface or on a key with fewer than 3
full-budget values (untuned, chosen from shorter runs or transferred: `hparam_surface`) are
left out with the reason. `rules` picks, per key, the first identified law in RULE_PREFERENCE: the
form a sweep can read (fit.json's `batch_rule`; `lr_rule` stays the lr-in-N rule of
`analysis.tuning.arms`). The critical batch size per cell and its law in D: `analysis.tuning.critical_batch`.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.fits import identification, law_check
from analysis.fits.bootstrap import intervals, resample_counts
from analysis.tuning import critical_batch, hparam_surface

FORMS = {"lr": (("C",), ("N", "D")), "batch": (("C",), ("D",), ("N", "D"))}
# Step Law's and Power Lines' findings: batch follows D; lr needs N and D (else DeepSeek's C)
RULE_PREFERENCE = {"lr": (("N", "D"), ("C",)), "batch": (("D",), ("C",))}
SOURCES = {
    ("C",): "DeepSeek LLM sec. 3.1 form",
    ("D",): "Step Law / Power Lines form",
    ("N", "D"): "Step Law form",
}


def form_name(variables: tuple[str, ...]) -> str:
    """fit.json's name of a form: 'C', 'D' or 'N_D'."""
    return "_".join(variables)


def fit_loglinear(logx: np.ndarray, logy: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Weighted least squares of log y = c0 + sum_j c_j log x_j for every row of `weights`
    (R, n): (R, 1 + p) coefficients; nan where a row's design is singular (a variable with
    fewer than 2 distinct values among the drawn points)."""
    A = np.column_stack([np.ones(len(logy)), logx])
    W = np.atleast_2d(weights)
    AtA = np.einsum("rn,ni,nj->rij", W, A, A)
    Aty = np.einsum("rn,ni,n->ri", W, A, logy)
    coef = np.full((len(W), A.shape[1]), np.nan)
    for r in range(len(W)):
        drawn = W[r] > 0
        if all(np.unique(logx[drawn, j]).size >= 2 for j in range(logx.shape[1])):
            if np.linalg.cond(AtA[r]) < 1e12:
                coef[r] = np.linalg.solve(AtA[r], Aty[r])
    return coef


def fit_law(points: list[dict], variables: tuple[str, ...], n_boot: int, seed: int) -> dict:
    """y = scale * prod(variable^exponent) over the points, with intervals and identification."""
    if len(variables) == 1:
        law = critical_batch.power_law(points, variables[0], n_boot, seed)
        if variables == ("C",) and len({p["C"] for p in points}) >= identification.MIN_RULE_SIZES:
            # C = 6 N D: a law in C needs optima at 2+ N and 2+ D (identification.compute_rule)
            span = identification.compute_rule({v: [p[v] for p in points] for v in ("N", "D")})
            law = identification.with_reasons(law, {**law["why_not_identified"], **span})
        return {**law, "form": SOURCES[variables]}
    logx = np.log(np.array([[p[v] for v in variables] for p in points], dtype=float))
    logy = np.log(np.array([p["y"] for p in points], dtype=float))
    logx = logx.reshape(len(points), len(variables))
    point = fit_loglinear(logx, logy, np.ones((1, len(points))))[0] if len(points) else None
    reps = (
        fit_loglinear(logx, logy, resample_counts(len(points), n_boot, seed))
        if len(points)
        else None
    )
    scale = float(np.exp(point[0])) if point is not None else np.nan
    exps = {
        v: float(point[1 + j]) if point is not None else np.nan for j, v in enumerate(variables)
    }
    ci = {"scale": None, **{v: None for v in variables}}
    if reps is not None:
        ci = intervals(
            {"scale": np.exp(reps[:, 0]), **{v: reps[:, 1 + j] for j, v in enumerate(variables)}}
        )
    law = {
        "variables": list(variables),
        "scale": scale,
        "exponents": exps,
        "ci95": ci,
        "n_cells": len(points),
        "n_boot": int(n_boot),
        "seed": int(seed),
        "points": points,
        "form": SOURCES[variables],
    }
    distinct = {v: int(np.unique(logx[:, j]).size) for j, v in enumerate(variables)}
    spread = len(points) > 2 and bool((logx.std(axis=0) > 0).all())
    corr = float(np.corrcoef(logx.T)[0, 1]) if spread else float("nan")
    return identification.with_reasons(law, identification.plane_rule(law, distinct, corr))


def _points(cells: list[dict], role: str) -> tuple[list[dict], dict[str, str]]:
    """The cells whose optimum of `role` is identified, as law points; why the others are not."""
    points, left_out = [], {}
    for c in cells:
        if role not in c["status"]:
            continue
        if c["status"][role] == "identified":
            points.append(
                {"arm": c["arm"], "N": c["N"], "D": c["D"], "C": c["C"], "y": c["optimum"][role]}
            )
        else:
            left_out[c["arm"]] = f"{c['status'][role]}: {c['why'][role]}"
    return points, left_out


def laws_for(cells: list[dict], role: str, key: str, n_boot: int, seed: int) -> dict:
    """Every form of one key's law, fitted to the cells that identify its optimum, and checked
    against them (`checked`)."""
    points, left_out = _points(cells, role)
    noise = grid_resolution(cells, role)
    return {
        form_name(v): {
            "key": key,
            **checked(fit_law(points, v, n_boot, seed), v, noise),
            "left_out": left_out,
        }
        for v in FORMS[role]
    }


def grid_resolution(cells: list[dict], role: str) -> float:
    """The noise of a cell's optimum in log units: half the median step of its grid in log
    (an optimum is placed between grid values; nan without a grid of 2+ values)."""
    steps = [
        np.median(np.diff(np.log(sorted(c["grid"][role]))))
        for c in cells
        if len(c.get("grid", {}).get(role, [])) >= 2 and min(c["grid"][role]) > 0
    ]
    return float(np.median(steps)) / 2 if steps else float("nan")


def checked(law: dict, variables: tuple[str, ...], log_noise: float) -> dict:
    """The law checked against its own optima (`analysis.fits.law_check`, in log units against half
    a grid step): one that misses them has every parameter not identified, with the worst."""
    points = law.get("points") or []
    if not points or not np.isfinite(log_noise) or not np.isfinite(law.get("scale", np.nan)):
        return law
    exps = law.get("exponents") or {variables[0]: law.get("exponent")}
    if not all(np.isfinite(e) for e in exps.values()):
        return law
    logy = np.log([p["y"] for p in points])
    pred = np.log(law["scale"]) + sum(e * np.log([p[v] for p in points]) for v, e in exps.items())
    labels = [p.get("arm", f"point {i}") for i, p in enumerate(points)]
    result = law_check.check(logy, pred, log_noise, labels)
    sentence = law_check.verdict("the law (log units, against half a grid step)", result)
    out = {**law, "law_check": {**result, "sentence": sentence}}
    if result["describes"]:
        return out
    names = ["scale", *exps] if "exponents" in law else ["scale", "exponent"]
    reasons = {n: f"the law does not describe its optima: {sentence}" for n in names}
    return identification.with_reasons(out, {**law.get("why_not_identified", {}), **reasons})


def identified(law: dict) -> bool:
    return not law.get("not_identified")


def rule(laws: dict, role: str) -> dict | None:
    """The first identified law of RULE_PREFERENCE in the format sweeps read (`lr_rule`,
    `batch_rule`): {key, variable, scale, exponent, ci95} or {key, scale, exponents, ci95}."""
    for variables in RULE_PREFERENCE[role]:
        law = laws[form_name(variables)]
        if not identified(law):
            continue
        base = {"key": law["key"], "scale": law["scale"], "form": law["form"]}
        if len(variables) == 1:
            return {
                **base,
                "variable": variables[0],
                "exponent": law["exponent"],
                "ci95": law["ci95"],
            }
        return {**base, "exponents": law["exponents"], "ci95": law["ci95"]}
    return None


def section(
    grid_runs: pd.DataFrame,
    tuned: dict,
    n_boot: int,
    seed: int,
    k: float = 1.0,
    variant: str = "variant",
    tolerance: float = hparam_surface.TOLERANCE,
) -> dict | None:
    """fit.json's `hparam_laws` for the arms of `tuned` (a `tuning` section), from every run of
    their grids; None when neither an lr nor a batch size was tuned."""
    roles = hparam_surface.role_keys(tuned["keys"])
    if not roles:
        return None
    cells = []
    for arm in tuned["arms"]:
        c = hparam_surface.cell(grid_runs, arm, roles, variant, tolerance)
        cells.append({**c, "C": 6 * k * c["N"] * c["D"]})
    laws = {role: laws_for(cells, role, key, n_boot, seed) for role, key in roles.items()}
    return {
        "keys": roles,
        "tolerance": tolerance,
        "compute": "C = k 6 N D, N non-embedding parameters"
        if k != 1.0
        else "C = 6 N D, N non-embedding parameters",
        "n_cells": len(cells),
        "cells": cells,
        "laws": laws,
        "critical_batch": critical_batch.section(cells, n_boot, seed) if "batch" in roles else None,
        "rules": {role: rule(laws[role], role) for role in roles},
    }


def batch_rule(hparams: dict | None) -> dict | None:
    """fit.json's top-level `batch_rule`: the identified batch law sweeps read, or None."""
    if not hparams:
        return None
    return hparams["rules"].get("batch")
