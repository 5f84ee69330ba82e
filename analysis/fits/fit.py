"""Fit every scaling law the data support (`fit_all`, `Fits`): approaches 1-3, the
single-variable laws, the extrapolation check; fit.json's sections and how they are written.
The command line is `analysis.fits.cli` (`python -m analysis.fit`), the printed summary
`analysis.fits.summary`.
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from analysis.data import compute_factor
from analysis.data.families import with_family
from analysis.data.load import (
    InputError,
    check_fittable,
)
from analysis.fits import identification
from analysis.fits import laws as law_forms  # --law: the parametric form (analysis/fits/laws/)
from analysis.fits.bootstrap import distinct, intervals, resample_counts
from analysis.fits.envelope import envelope, envelope_report, padded, resampled_envelopes
from analysis.fits.isoflop import budget_groups, isoflop_groups, isoflop_report
from analysis.fits.laws import chinchilla
from analysis.fits.laws.chinchilla import FlopsPerToken, Parametric
from analysis.fits.powerlaw import PowerLaw, fit_power_laws, theta_of
from analysis.tuning import arms as tuning
from analysis.tuning import hparam_laws

MIN_POINTS_IRREDUCIBLE = 5  # a 3-parameter law needs spare points; fewer -> pure power law
# approach 2 with --params total: a planned budget holds 6 N D fixed for non-embedding N only
NOT_ISO = "the sweep's IsoFLOP budgets are iso in 6 N D for non-embedding N only"
NOT_ISO_EXACT = (
    "the runs do not say their IsoFLOP budgets were planned in exact FLOPs "
    "(column budget_flops = exact); 6ND budgets are not iso in exact FLOPs"
)


COMPUTE_NAMES = {"6nd": "6ND", "exact": "exact FLOPs"}  # what C counts, as reports name it


def convention(section: dict) -> str:
    """The compute convention of a fit.json section ('6ND' or 'exact FLOPs'; 6ND if unset;
    'k 6ND, k = ...' for a family whose C is k times 6ND, `analysis.data.compute_factor`)."""
    k = section.get("k", section.get("compute_convention", {}).get("k", 1.0))
    if section.get("compute", "6nd") == "6nd" and k != 1.0:
        return compute_factor.label(k)
    return COMPUTE_NAMES[section.get("compute", "6nd")]


def default_budgets(runs: pd.DataFrame) -> list[float]:
    """The largest measured compute and 100x it (an extrapolation worth reporting)."""
    top = float(runs["C"].max())
    return [float(f"{top:.3g}"), float(f"{100 * top:.3g}")]


# ---------------------------------------------------------------- single-variable laws


def law_section(
    x, y, n_boot: int, seed: int, irreducible: bool | None = None, resampled=None
) -> dict | None:
    """Power law y = E + A x^-alpha with bootstrap intervals over the points.

    `resampled` (xs, ys, mask), padded (R, width) arrays as `envelope.padded` makes them,
    replaces the resampling of the points themselves: e.g. the frontier recomputed in every
    resample of runs. A replicate with fewer distinct x than the law needs gives no value.
    """
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if np.unique(x).size < 3:
        return None
    if irreducible is None:
        irreducible = np.unique(x).size >= MIN_POINTS_IRREDUCIBLE
    A, alpha, E = fit_power_laws(x, y, irreducible=irreducible)[0]
    if not np.isfinite(alpha):
        return None
    law = PowerLaw(float(A), float(alpha), float(E))
    warm = theta_of(law) if irreducible else None
    if resampled is None:
        xs, ys, mask = x, y, resample_counts(x.size, n_boot, seed)
    else:
        xs, ys, mask = resampled
    reps = fit_power_laws(xs, ys, irreducible=irreducible, weights=mask, x0=warm)
    needed = MIN_POINTS_IRREDUCIBLE if irreducible else 3
    reps[distinct(mask, xs) < needed] = np.nan
    names = ("A", "alpha", "E") if irreducible else ("A", "alpha")
    section = {
        **{k: getattr(law, k) for k in names},
        "irreducible": bool(irreducible),
        "n_points": int(x.size),
        "points": [{"x": float(a), "y": float(b)} for a, b in zip(x, y)],
        "ci95": intervals({k: reps[:, i] for i, k in enumerate(names)}),
    }
    reasons = identification.power_law(section, y_min=float(y.min()))
    return identification.with_reasons(section, reasons)


def _at_largest(runs: pd.DataFrame, fixed: str, rtol: float = 0.05) -> pd.DataFrame:
    """Runs whose `fixed` axis is within rtol of its largest value."""
    return runs[runs[fixed] >= runs[fixed].max() / (1 + rtol)]


def final_point_envelopes(runs: pd.DataFrame, n_boot: int, seed: int) -> list[pd.DataFrame]:
    """The compute frontier of every bootstrap resample of runs (final points only): shared by
    approach 1 (without intermediate points) and the L(C) law, which resample runs alike."""
    points = runs[["run_id", "N", "D", "C", "loss"]]
    counts = resample_counts(points["run_id"].nunique(), n_boot, seed)
    return resampled_envelopes(points, counts)


def kaplan_section(
    runs: pd.DataFrame, n_boot: int, seed: int, fronts: list[pd.DataFrame] | None = None
) -> dict:
    """L(N) at the largest D, L(D) at the largest N, and L(C) along the compute frontier.

    L(C)'s replicates resample runs and recompute the frontier in each (as approach 1 does;
    `fronts` from `final_point_envelopes`), not the frontier points: those were selected by the
    very losses being resampled."""
    at_d, at_n = _at_largest(runs, "D"), _at_largest(runs, "N")
    front = envelope(runs[["run_id", "N", "C", "loss"]])
    if fronts is None:
        fronts = final_point_envelopes(runs, n_boot, seed)
    fronts = padded(fronts)
    return {
        "L_N": law_section(at_d["N"], at_d["loss"], n_boot, seed),
        "L_N_at_D": float(at_d["D"].median()),
        "L_D": law_section(at_n["D"], at_n["loss"], n_boot, seed),
        "L_D_at_N": float(at_n["N"].median()),
        "L_C": law_section(front["C"], front["loss"], n_boot, seed, resampled=fronts),
    }


# ---------------------------------------------------------------- extrapolation check


def default_holdout_threshold(runs: pd.DataFrame, rtol: float = 0.1) -> float:
    """Just below the largest IsoFLOP budget (its smallest C), or below the largest compute
    budget when there is no IsoFLOP profile. Runs of any sweep within rtol below that budget are
    held out with it, so no run at (nearly) the held-out compute is trained on."""
    profiles = isoflop_groups(runs, rtol)
    C = runs["C"].to_numpy(dtype=float)
    labels = profiles if (profiles >= 0).any() else budget_groups(C, rtol)
    top = labels == labels[np.argmax(np.where(labels >= 0, C, -np.inf))]
    lowest = C[top].min()
    return float(C[C >= lowest / (1 + rtol)].min() * 0.999)


def extrapolation_section(
    runs: pd.DataFrame, threshold: float | None, fixed: dict[str, float] | None = None
) -> dict:
    """Fit approach 3 below a compute threshold, predict the held-out larger runs."""
    if threshold is None:
        threshold = default_holdout_threshold(runs)
    train, test = runs[runs["C"] < threshold], runs[runs["C"] >= threshold]
    section: dict = {"threshold_C": float(threshold), "n_train": len(train), "n_test": len(test)}
    try:
        check_fittable(train, "the runs below the threshold")
    except InputError as err:
        return {**section, "skipped": str(err)}
    if test.empty:
        return {**section, "skipped": "no runs at or above the threshold"}
    law = chinchilla.fit(train["N"], train["D"], train["loss"], fixed=fixed)
    pred = law.predict(test["N"], test["D"])
    rel = (pred - test["loss"].to_numpy()) / test["loss"].to_numpy()
    section["fit"] = {k: getattr(law, k) for k in ("E", "A", "B", "alpha", "beta")}
    section["runs"] = [
        {"run_id": r, "N": n, "D": d, "C": c, "loss": y, "predicted": p, "rel_error": e}
        for r, n, d, c, y, p, e in zip(
            test["run_id"], test["N"], test["D"], test["C"], test["loss"], pred, rel
        )
    ]
    for row, (_, run) in zip(section["runs"], test.iterrows()):  # what the report names it by
        for col in ("variant", "seed"):
            if col in test.columns and pd.notna(run[col]):
                row[col] = int(run[col]) if col == "seed" else str(run[col])
    section["mean_abs_rel_error"] = float(np.mean(np.abs(rel)))
    return section


# ---------------------------------------------------------------- all fits for one set of runs


@dataclass(frozen=True)
class Fits:
    """Every law fitted to one set of runs: the fitted objects, and each section of fit.json.

    `law` is approach 3's point estimate as the fit returned it (the figures draw it), so no
    caller rebuilds it from the JSON. The sections are the plain dicts fit.json is written from
    (`as_dict`, in the file's order); `contracts.md` describes them.
    """

    law: Parametric | None  # approach 3's L(N, D) point estimate; None when not fitted
    flops: FlopsPerToken | None  # f(N) of the exact-FLOPs allocation; None under C = 6ND
    n_runs: int
    compute: str  # "6nd" or "exact": what every C counts
    budgets: list[float]  # where approach 3's allocation is reported
    parametric: dict  # approach 3: estimates, allocation, intervals, identification
    isoflop: dict | None  # approach 2; None without IsoFLOP profiles, {"skipped": why} if not run
    envelope: dict  # approach 1
    kaplan: dict  # single-variable laws L_N, L_D, L_C (each a section or None)
    extrapolation: dict  # approach 3 fitted below a compute threshold, checked above it
    tuning: dict | None = None  # --tune: every arm's grid, losses and choice; None untuned
    lr_rule: dict | None = None  # --tune with an lr key: lr_opt = scale * N^exponent
    k: float = (
        1.0  # C / (6 N D) of the runs (`analysis.data.compute_factor`): 1 but encoder_decoder
    )
    family: str = "decoder"
    hparams: dict | None = None  # --tune with lr / batch keys: laws of the optima in C, N, D

    def as_dict(self) -> dict:
        """fit.json's content for these runs (`tuning` and `lr_rule` only for tuned runs;
        `compute_convention` only where C is not 6 N D)."""
        tuned = {} if self.tuning is None else {"tuning": self.tuning, "lr_rule": self.lr_rule}
        tuned.update(hparam_entries(self.hparams))
        counts = (
            {}
            if self.k == 1.0
            else {"compute_convention": compute_factor.section(self.k, self.family)}
        )
        return {
            "n_runs": self.n_runs,
            "compute": self.compute,
            **counts,
            "budgets": self.budgets,
            "parametric": self.parametric,
            "isoflop": self.isoflop,
            "envelope": self.envelope,
            "kaplan": self.kaplan,
            "extrapolation": self.extrapolation,
            **tuned,
        }


def hparam_entries(hparams: dict | None) -> dict:
    """fit.json's `hparam_laws`, and `batch_rule` where a batch law is identified."""
    if hparams is None:
        return {}
    rule = hparam_laws.batch_rule(hparams)
    return {"hparam_laws": hparams, **({"batch_rule": rule} if rule else {})}


@dataclass(frozen=True)
class FitOptions:
    """How `fit_all` fits: bootstrap size and seed, budgets (default: `default_budgets`),
    extrapolation threshold, whether approach 2 runs, what C counts, fixed parameters."""

    n_boot: int = 1000
    seed: int = 0
    budgets: list[float] | None = None
    holdout_threshold: float | None = None
    isoflop: bool = True
    compute: str = "6nd"
    fixed: dict[str, float] | None = None
    parametric: bool = True  # approach 3; `fit --law NAME` puts that law there instead

    @classmethod
    def from_args(cls, args: argparse.Namespace, **overrides) -> FitOptions:
        return cls(
            **{
                **dict(
                    n_boot=args.bootstrap,
                    seed=args.seed,
                    budgets=args.budget,
                    holdout_threshold=args.holdout_above,
                    compute=args.compute,
                    fixed=args.fixed,
                ),
                **overrides,
            }
        )


def fit_all(
    runs: pd.DataFrame,
    options: FitOptions = FitOptions(),
    *,
    curves: pd.DataFrame | None = None,
    intermediate: bool = False,
    tuned: dict | None = None,
    grid_runs: pd.DataFrame | None = None,
) -> Fits:
    """Every law the runs support, fitted (runs validated with `check_fittable`).

    `curves` (run_id, tokens, val_loss) with `intermediate=True` adds every logged evaluation to
    approach 1. Only valid when the learning-rate schedule does not depend on the run length
    (e.g. constant): a cosine run's intermediate losses sit above those of a run planned for
    that many tokens, so by default only the final point of each run is used.
    `options.isoflop=False` skips approach 2 (its budgets are not iso in the compute fitted).
    `options.compute`: "6nd" (C = 6 N D, Kaplan's and Chinchilla's convention) or "exact" (C =
    the runs' exact training FLOPs, column C_exact, which count the head, embedding side and
    attention): every C below, budgets included, is then exact, and approach 3's allocation
    minimises L under C = f(N) D with f fitted to the runs (`chinchilla.FlopsPerToken`).
    Approach 2 then uses only budgets that are iso in exact FLOPs (`budget_flops: exact` plans).
    `options.fixed` holds approach-3 parameters at given values (e.g. {"E": 1.7}).
    `tuned`: the `tuning` section of `tuning.select` when `runs` are the arms' results; the
    fit then carries the arms of these runs and the lr rule fitted to them; with `grid_runs`
    (every run of their grids) also the laws of the optimal lr and batch size.
    `options.parametric=False` leaves approach 3 out (`fit --law NAME` puts that law's section
    there instead, which may need fewer runs than approach 3's six).
    """
    if options.parametric:
        check_fittable(runs)
    n_boot, seed, compute = options.n_boot, options.seed, options.compute
    k = compute_factor.of_runs(runs)  # C = k 6ND: every conversion between C and D uses it
    section = None if tuned is None else tuning.for_runs(tuned, runs["run_id"])
    runs, flops = _on_compute_axis(runs, compute, k)
    budgets = options.budgets or default_budgets(runs)
    iso = _isoflop_section(runs, options, k)
    law, parametric = None, {"skipped": "approach 3 not fitted: another law was chosen (--law)"}
    if options.parametric:
        law, parametric, _ = law_forms.approach3(
            runs, budgets, n_boot, seed, options.fixed, flops, k
        )
    fronts = final_point_envelopes(runs, n_boot, seed)  # approach 1 and L(C) alike
    return Fits(
        law=law,
        flops=flops,
        n_runs=int(len(runs)),
        compute=compute,
        budgets=budgets,
        parametric=parametric,
        isoflop=iso,
        envelope=_envelope_section(runs, curves, intermediate, n_boot, seed, fronts),
        kaplan=kaplan_section(runs, n_boot, seed, fronts),
        extrapolation=extrapolation_section(runs, options.holdout_threshold, options.fixed),
        tuning=section,
        lr_rule=None if section is None else tuning.lr_rule(section, n_boot, seed, k),
        k=k,
        family=str(with_family(runs)["family"].iloc[0]),
        hparams=None if grid_runs is None else _hparams(grid_runs, section, n_boot, seed, k),
    )


def _hparams(grid_runs: pd.DataFrame, section, n_boot: int, seed: int, k: float):
    """The lr and batch-size laws of the arms of `section` (None when untuned)."""
    return None if section is None else hparam_laws.section(grid_runs, section, n_boot, seed, k)


def _on_compute_axis(runs: pd.DataFrame, compute: str, k: float):
    """The runs with C in the chosen convention, and f(N) of C = f(N) D when it is exact."""
    if compute != "exact":
        return runs, None
    check_exact_compute(runs)
    runs = runs.assign(C=runs["C_exact"].astype(float))
    return runs, FlopsPerToken.fit(runs["N"], runs["C"], runs["D"], k)


def _envelope_section(runs, curves, intermediate: bool, n_boot: int, seed: int, fronts) -> dict:
    """Approach 1 on the final points (reusing `fronts`) or, with `intermediate`, every evaluation."""
    with_curves = intermediate and curves is not None and not curves.empty
    points = (
        _with_evaluations(runs, curves) if with_curves else runs[["run_id", "N", "D", "C", "loss"]]
    )
    return {
        **(
            envelope_report(points, n_boot, seed, fronts=None if with_curves else fronts)
            or {"skipped": "too few points"}
        ),
        "uses_intermediate_points": bool(intermediate and curves is not None),
    }


def _isoflop_section(runs: pd.DataFrame, options: FitOptions, k: float) -> dict:
    """Approach 2, or why it is skipped: its budgets must be iso in the compute being fitted."""
    isoflop = options.isoflop
    if options.compute == "exact" and not _planned_exact(runs):
        isoflop = False  # a 6ND profile is not iso in exact FLOPs (its small sizes cost more)
    if isoflop:
        return isoflop_report(runs, options.n_boot, options.seed, k=k)
    return {"skipped": NOT_ISO_EXACT if options.compute == "exact" else NOT_ISO}


def _with_evaluations(runs: pd.DataFrame, curves: pd.DataFrame) -> pd.DataFrame:
    """The runs' final points plus every logged evaluation, as (run_id, N, D, C, loss)."""
    # an evaluation after `tokens` tokens cost the run's FLOPs per token (C / D) times that
    extra = curves.merge(
        runs.assign(per_token=runs["C"] / runs["D"])[["run_id", "N", "per_token"]], on="run_id"
    )
    extra = extra.assign(
        D=extra["tokens"], C=extra["per_token"] * extra["tokens"], loss=extra["val_loss"]
    )
    return pd.concat(
        [runs[["run_id", "N", "D", "C", "loss"]], extra[["run_id", "N", "D", "C", "loss"]]],
        ignore_index=True,
    )


def _planned_exact(runs: pd.DataFrame) -> bool:
    """Whether every run says its IsoFLOP budget was planned in exact FLOPs (`budget_flops`)."""
    return "budget_flops" in runs.columns and bool((runs["budget_flops"] == "exact").all())


def check_exact_compute(runs: pd.DataFrame) -> None:
    """--compute exact needs a positive C_exact above k 6 N D (the runs' own 6ND count,
    `analysis.data.compute_factor`) for every run."""
    if "C_exact" not in runs.columns:
        raise InputError("--compute exact: no column 'C_exact' (exact training FLOPs) in the runs")
    c_exact = pd.to_numeric(runs["C_exact"], errors="coerce").to_numpy(dtype=float)
    k = compute_factor.of_runs(runs)
    six_nd = "6 N D" if k == 1.0 else f"k 6 N D (k = {k:.4g})"
    bad = ~(c_exact > 6 * k * runs["N"].to_numpy(float) * runs["D"].to_numpy(float))
    if bad.any():
        raise InputError(
            f"--compute exact: column 'C_exact' has {int(bad.sum())} missing value(s) or value(s) "
            f"not above {six_nd} (exact training FLOPs include the head and attention)"
        )
    if runs["N"].nunique() < 2:
        raise InputError("--compute exact: needs runs at two or more sizes N")


def jsonable(obj):
    """Plain JSON types; NaN and infinities become null so the file is standard JSON."""
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [jsonable(v) for v in obj]
    if isinstance(obj, np.generic):
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def dumps(result: dict) -> str:
    return json.dumps(jsonable(result), indent=2) + "\n"
