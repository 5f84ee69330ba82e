"""Scaling-law forms, a registry by name, and fit.json's `parametric` section for any of them.

    LAWS["kaplan"].predict(theta, {"N": ..., "D": ...})

`chinchilla` (default, approach 3: `analysis.fits.laws.chinchilla`), `kaplan` (Kaplan et al. 2020,
eq. 1.5), `datablations` (Muennighoff et al. 2023, needs a column U of unique tokens) and
`overtrain` (Gadre et al. 2024). Every form: fitted from a start grid, bootstrap over runs,
identification flags, allocation for compute budgets; `section` writes fit.json's shape
(docs/contracts.md), `replicates` the bootstrap parameters that predictions need.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.data.load import InputError
from analysis.data.load import check_fittable as check_runs
from analysis.fits import identification
from analysis.fits.bootstrap import intervals, resample_counts
from analysis.fits.laws import chinchilla, datablations, kaplan, overtrain
from analysis.fits.laws.base import HUBER_DELTA, Law, fit_and_bootstrap
from analysis.fits.laws.chinchilla import FlopsPerToken, Parametric

LAWS: dict[str, Law] = {
    law.name: law for law in (chinchilla.LAW, kaplan.LAW, datablations.LAW, overtrain.LAW)
}
DEFAULT = "chinchilla"


def get(name: str) -> Law:
    if name not in LAWS:
        raise InputError(f"--law {name}: unknown law; choose from {', '.join(LAWS)}")
    return LAWS[name]


def check_columns(runs: pd.DataFrame, law: Law, what: str = "the runs") -> None:
    """The columns the law needs, finite and positive, and U <= D; one line otherwise."""
    for col in law.columns:
        if col not in runs.columns:
            raise InputError(
                f"--law {law.name} needs a column '{col}'"
                f"{' (unique training tokens)' if col == 'U' else ''}; {what} "
                f"have {sorted(map(str, runs.columns))}"
            )
        values = pd.to_numeric(runs[col], errors="coerce").to_numpy(dtype=float)
        bad = ~(np.isfinite(values) & (values > 0))
        if bad.any():
            raise InputError(
                f"column '{col}' has {int(bad.sum())} missing, non-numeric or "
                f"non-positive value(s) in {what}"
            )
    if "U" in law.columns:
        over = runs["U"].to_numpy(float) > runs["D"].to_numpy(float) * (1 + 1e-9)
        if over.any():
            i = int(np.flatnonzero(over)[0])
            raise InputError(
                f"column 'U' is larger than D in {int(over.sum())} row(s) of {what} "
                f"(first: row {i}, U = {runs['U'].iloc[i]:.4g} > D = "
                f"{runs['D'].iloc[i]:.4g}); unique tokens cannot exceed tokens trained"
            )
        single = datablations.single_epoch(runs)
        if single.sum() <= 5 or runs["N"][single].nunique() < 2 or runs["D"][single].nunique() < 2:
            raise InputError(
                f"--law datablations fits E, A, B, alpha, beta on single-epoch runs "
                f"(D <= U): {what} have {int(single.sum())}; it needs at least 6, "
                "with two or more distinct N and D"
            )


def check_fittable(runs: pd.DataFrame, law: Law, what: str = "the runs") -> None:
    """More runs than the law's own parameters, and two or more distinct N and D (approach 3's
    message for the default law)."""
    if law.name == DEFAULT:
        check_runs(runs, what)
    else:
        check_runs(runs, what, law.n_params, f"the {law.name} law ({', '.join(law.params)})")


def _fit(law: Law, runs: pd.DataFrame, n_boot: int, seed: int, fixed: dict | None = None):
    """(theta (P,) as the fit found it, objective, thetas (R, P), converged (R,))."""
    counts = resample_counts(len(runs), n_boot, seed)
    if law.fitter is not None:
        return law.fitter(law, runs, counts, fixed)
    point, thetas, converged = fit_and_bootstrap(law, runs, counts, fixed)
    return point.theta, point.objective, thetas, converged


def fit_law(law: Law, runs: pd.DataFrame, n_boot: int, seed: int, fixed: dict | None = None):
    """(theta (P,), objective, thetas (R, P), converged (R,)) with counts as approach 3 draws
    them (`resample_counts(len(runs), n_boot, seed)`)."""
    theta, objective, thetas, converged = _fit(law, runs, n_boot, seed, fixed)
    return (theta if law.fitter is not None else law.settle(theta)), objective, thetas, converged


def fitted_section(
    law: Law,
    runs: pd.DataFrame,
    budgets,
    n_boot: int,
    seed: int,
    fixed: dict | None = None,
    k: float = 1.0,
    flops: FlopsPerToken | None = None,
) -> tuple[np.ndarray, dict, np.ndarray]:
    """(the point theta as fitted, fit.json's `parametric` section, the bootstrap thetas
    (R, P)): the one builder of every form's section, the default approach 3 included.

    `fixed` holds named parameters at given values; `k` = C / (6ND) of the runs
    (`analysis.data.compute_factor`), written where it is not 1; `flops` (a law with
    `exact_compute`) puts the allocation under exact training FLOPs, C = f(N) D.
    """
    raw, objective, thetas, converged = _fit(law, runs, n_boot, seed, fixed)
    theta = raw if law.fitter is not None else law.settle(raw)
    U = float(runs["U"].max()) if "U" in law.columns else None
    point = {
        q: float(v[0]) for q, v in law.quantities(theta[None, :], budgets, U, k, flops).items()
    }
    ci = intervals(law.quantities(thetas, budgets, U, k, flops))
    for name in fixed or {}:
        ci[name] = None
    alloc_names = ("N_opt", "D_opt", "tokens_per_param")
    cite = law.cites
    out = {
        "law": law.name,
        **({"reference": law.reference} if cite else {}),
        **{q: point[q] for q in (*law.params, *law.derived)},
        "fixed": dict(fixed or {}),
        **({"fitted": law.fitted} if cite else {}),
        "compute": "6nd" if flops is None else "exact",
        **({} if k == 1.0 else {"k": k}),  # C = k 6ND: the allocation's C <-> D
        **(
            {"flops_per_token": None if flops is None else {"c": flops.c, "q": flops.q}}
            if law.exact_compute
            else {}
        ),
        "n_points": int(len(runs)),
        "objective": objective,
        "huber_delta": HUBER_DELTA,
        "allocation": [
            {
                "C": float(C),
                **({"U": U} if U is not None else {}),
                **{q: point[f"{q}@{C:.3g}"] for q in alloc_names},
            }
            for C in budgets
        ],
        "n_boot": int(n_boot),
        "n_boot_converged": int(np.sum(converged)),
        "ci95": ci,
    }
    cols = {c: runs[c].to_numpy(float) for c in law.columns}
    noise = identification.noise_of(runs["loss"], law.point_loss(raw, cols))
    counts = resample_counts(len(runs), n_boot, seed)  # the resamples `_fit` refitted
    why = identification.law_reasons(
        law, point, ci, converged, float(runs["loss"].min()), fixed, noise, counts
    )
    if law.extra_reasons:
        why = {**why, **law.extra_reasons(runs, {k: point[k] for k in law.params})}
    if {"a", "b"} <= set(law.derived):  # the allocation's exponents: cut to their range
        out = identification.clip_allocation(out)
        why = {**identification.range_problems(out), **why}
    return raw, identification.with_reasons(out, why), thetas


def section(
    law: Law,
    runs: pd.DataFrame,
    budgets,
    n_boot: int,
    seed: int,
    fixed: dict | None = None,
    k: float = 1.0,
    flops: FlopsPerToken | None = None,
) -> tuple[dict, np.ndarray]:
    """fit.json's `parametric` section for a form, and its replicates (R, P) for predictions
    (`fitted_section`)."""
    _, out, thetas = fitted_section(law, runs, budgets, n_boot, seed, fixed, k, flops)
    return out, thetas


def approach3(
    runs: pd.DataFrame,
    budgets,
    n_boot: int,
    seed: int,
    fixed: dict | None = None,
    flops: FlopsPerToken | None = None,
    k: float = 1.0,
) -> tuple[Parametric, dict, np.ndarray]:
    """Approach 3 through the registry: (the fit, fit.json's `parametric` section, the
    bootstrap thetas (R, 5)); the default form's `fitted_section`."""
    raw, out, thetas = fitted_section(LAWS[DEFAULT], runs, budgets, n_boot, seed, fixed, k, flops)
    return Parametric.from_theta(raw, len(runs), out["objective"]), out, thetas


def replicates(law: Law, thetas: np.ndarray) -> pd.DataFrame:
    """One row per bootstrap replicate, the law's parameters by name (linear scale)."""
    return pd.DataFrame(law.to_values(thetas))


def replicates_path(fit_json) -> str:
    """Where `analysis.fits.fit` puts the replicates of a fit.json: fit.json -> fit.replicates.csv."""
    s = str(fit_json)
    return (s[:-5] if s.endswith(".json") else s) + ".replicates.csv"


def law_of(section: dict) -> Law:
    """The form of a `parametric` section (no `law` key, as in a hand-written file: approach 3)."""
    return get(section.get("law", DEFAULT))
