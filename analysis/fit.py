"""Fit every scaling law the data support; CLI writes fit.json and prints a summary.

    python -m analysis.fit --csv runs.csv [--group arch] [--bootstrap 1000] [--seed 0] --out fit.json
    python -m analysis.fit --experiment NAME [--sweep ID] [--tracking-uri URI] --out fit.json

--csv, --experiment and --sweep are repeatable: the runs of every source are fitted together.

Exit code 2 with one line on stderr, and nothing written, when the input cannot be fitted.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from analysis import chinchilla
from analysis.bootstrap import intervals, resample_counts
from analysis.load import (
    InputError,
    add_selection_args,
    check_fittable,
    load_selected,
    with_total_params,
)
from analysis.powerlaw import PowerLaw, fit_power_laws, theta_of

MIN_POINTS_IRREDUCIBLE = 5  # a 3-parameter law needs spare points; fewer -> pure power law
# approach 2 with --params total: a planned budget holds 6 N D fixed for non-embedding N only
NOT_ISO = "the sweep's IsoFLOP budgets are iso in 6 N D for non-embedding N only"


def default_budgets(runs: pd.DataFrame) -> list[float]:
    """The largest measured compute and 100x it (an extrapolation worth reporting)."""
    top = float(runs["C"].max())
    return [float(f"{top:.3g}"), float(f"{100 * top:.3g}")]


# ---------------------------------------------------------------- single-variable laws


def law_section(x, y, n_boot: int, seed: int, irreducible: bool | None = None) -> dict | None:
    """Power law y = E + A x^-alpha with bootstrap intervals over the points."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if np.unique(x).size < 3:
        return None
    if irreducible is None:
        irreducible = np.unique(x).size >= MIN_POINTS_IRREDUCIBLE
    A, alpha, E = fit_power_laws(x, y, irreducible=irreducible)[0]
    if not np.isfinite(alpha):
        return None
    law = PowerLaw(float(A), float(alpha), float(E))
    counts = resample_counts(x.size, n_boot, seed)
    warm = theta_of(law) if irreducible else None
    reps = fit_power_laws(x, y, irreducible=irreducible, weights=counts, x0=warm)
    names = ("A", "alpha", "E") if irreducible else ("A", "alpha")
    return {
        **{k: getattr(law, k) for k in names},
        "irreducible": bool(irreducible),
        "n_points": int(x.size),
        "points": [{"x": float(a), "y": float(b)} for a, b in zip(x, y)],
        "ci95": intervals({k: reps[:, i] for i, k in enumerate(names)}),
    }


def _at_largest(runs: pd.DataFrame, fixed: str, rtol: float = 0.05) -> pd.DataFrame:
    """Runs whose `fixed` axis is within rtol of its largest value."""
    return runs[runs[fixed] >= runs[fixed].max() / (1 + rtol)]


def kaplan_section(runs: pd.DataFrame, n_boot: int, seed: int) -> dict:
    """L(N) at the largest D, L(D) at the largest N, and L(C) along the compute frontier."""
    at_d, at_n = _at_largest(runs, "D"), _at_largest(runs, "N")
    front = chinchilla.envelope(runs[["run_id", "N", "C", "loss"]])
    return {
        "L_N": law_section(at_d["N"], at_d["loss"], n_boot, seed),
        "L_N_at_D": float(at_d["D"].median()),
        "L_D": law_section(at_n["D"], at_n["loss"], n_boot, seed),
        "L_D_at_N": float(at_n["N"].median()),
        "L_C": law_section(front["C"], front["loss"], n_boot, seed),
    }


# ---------------------------------------------------------------- extrapolation check


def default_holdout_threshold(runs: pd.DataFrame, rtol: float = 0.1) -> float:
    """Just below the largest IsoFLOP budget (its smallest C), or below the largest compute
    budget when there is no IsoFLOP profile. Runs of any sweep within rtol below that budget are
    held out with it, so no run at (nearly) the held-out compute is trained on."""
    profiles = chinchilla.isoflop_groups(runs, rtol)
    C = runs["C"].to_numpy(dtype=float)
    labels = profiles if (profiles >= 0).any() else chinchilla.budget_groups(C, rtol)
    top = labels == labels[np.argmax(np.where(labels >= 0, C, -np.inf))]
    lowest = C[top].min()
    return float(C[C >= lowest / (1 + rtol)].min() * 0.999)


def extrapolation_section(runs: pd.DataFrame, threshold: float | None) -> dict:
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
    law = chinchilla.fit_parametric(train["N"], train["D"], train["loss"])
    pred = law.predict(test["N"], test["D"])
    rel = (pred - test["loss"].to_numpy()) / test["loss"].to_numpy()
    section["fit"] = {k: getattr(law, k) for k in ("E", "A", "B", "alpha", "beta")}
    section["runs"] = [
        {"run_id": r, "N": n, "D": d, "C": c, "loss": y, "predicted": p, "rel_error": e}
        for r, n, d, c, y, p, e in zip(
            test["run_id"], test["N"], test["D"], test["C"], test["loss"], pred, rel
        )
    ]
    section["mean_abs_rel_error"] = float(np.mean(np.abs(rel)))
    return section


# ---------------------------------------------------------------- all fits for one set of runs


def fit_all(
    runs: pd.DataFrame,
    *,
    n_boot: int = 1000,
    seed: int = 0,
    budgets: list[float] | None = None,
    curves: pd.DataFrame | None = None,
    intermediate: bool = False,
    holdout_threshold: float | None = None,
    isoflop: bool = True,
) -> dict:
    """Every section of fit.json for one set of runs (validated with `check_fittable`).

    `curves` (run_id, tokens, val_loss) with `intermediate=True` adds every logged evaluation to
    approach 1. Only valid when the learning-rate schedule does not depend on the run length
    (e.g. constant): a cosine run's intermediate losses sit above those of a run planned for
    that many tokens, so by default only the final point of each run is used.
    `isoflop=False` skips approach 2 (its budgets are not iso in the compute being fitted).
    """
    check_fittable(runs)
    budgets = budgets or default_budgets(runs)
    iso = chinchilla.isoflop_report(runs, n_boot, seed) if isoflop else {"skipped": NOT_ISO}
    law, parametric = chinchilla.parametric_report(runs, budgets, n_boot, seed)
    points = runs[["run_id", "N", "C", "loss"]]
    if intermediate and curves is not None and not curves.empty:
        extra = curves.merge(runs[["run_id", "N"]], on="run_id")
        extra = extra.assign(C=6 * extra["N"] * extra["tokens"], loss=extra["val_loss"])
        points = pd.concat([points, extra[["run_id", "N", "C", "loss"]]], ignore_index=True)
    return {
        "n_runs": int(len(runs)),
        "budgets": budgets,
        "parametric": parametric,
        "isoflop": iso,
        "envelope": {
            **(chinchilla.envelope_report(points, n_boot, seed) or {"skipped": "too few points"}),
            "uses_intermediate_points": bool(intermediate and curves is not None),
        },
        "kaplan": kaplan_section(runs, n_boot, seed),
        "extrapolation": extrapolation_section(runs, holdout_threshold),
    }


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


# ---------------------------------------------------------------- readable summary


def _ci(section: dict, key: str, fmt: str = ".4g") -> str:
    lo_hi = section.get("ci95", {}).get(key)
    interval = f" [{lo_hi[0]:{fmt}}, {lo_hi[1]:{fmt}}]" if lo_hi else " [no interval]"
    return f"{section[key]:{fmt}}{interval}"


def summary(result: dict, title: str = "") -> str:
    p = result["parametric"]
    lines = [f"== {title or 'fit'}: {result['n_runs']} runs, 95% bootstrap intervals"]
    lines.append(
        f"approach 3: L = {_ci(p, 'E')} + {_ci(p, 'A')} / N^{_ci(p, 'alpha')}"
        f" + {_ci(p, 'B')} / D^{_ci(p, 'beta')}"
    )
    lines.append(f"  N_opt ~ C^a, a = {_ci(p, 'a', '.3f')};  D_opt ~ C^b, b = {_ci(p, 'b', '.3f')}")
    for row in p["allocation"]:
        tag = f"@{row['C']:.3g}"
        q = {k: row[k] for k in ("N_opt", "D_opt", "tokens_per_param")}
        q["ci95"] = {k: p["ci95"].get(f"{k}{tag}") for k in q}
        lines.append(
            f"  C = {row['C']:.3g}: N_opt = {_ci(q, 'N_opt', '.3g')}, "
            f"D_opt = {_ci(q, 'D_opt', '.3g')}, D/N = {_ci(q, 'tokens_per_param', '.3g')}"
        )
    for name, key in (("approach 2 (IsoFLOP)", "isoflop"), ("approach 1 (envelope)", "envelope")):
        s = result.get(key)
        if s and "a" in s:
            lines.append(f"{name}: a = {_ci(s, 'a', '.3f')}, b = {_ci(s, 'b', '.3f')}")
    ext = result["extrapolation"]
    if "mean_abs_rel_error" in ext:
        lines.append(
            f"extrapolation: fit on C < {ext['threshold_C']:.3g} ({ext['n_train']} runs), "
            f"mean |relative error| on {ext['n_test']} held-out runs = "
            f"{100 * ext['mean_abs_rel_error']:.2f}%"
        )
    return "\n".join(lines)


# ---------------------------------------------------------------- CLI


def add_fit_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bootstrap", type=int, default=1000, help="bootstrap replicates")
    parser.add_argument("--seed", type=int, default=0, help="bootstrap seed")
    parser.add_argument(
        "--budget", type=float, action="append",
        help="compute budget (FLOPs) for N_opt/D_opt; repeatable (default: max C and 100x)",
    )  # fmt: skip
    parser.add_argument("--holdout-above", type=float, help="extrapolation threshold C")


def check_fit_args(args: argparse.Namespace) -> None:
    if args.bootstrap < 10:
        raise InputError(f"--bootstrap must be at least 10 (got {args.bootstrap})")
    for c in args.budget or []:
        if not c > 0:
            raise InputError(f"--budget must be a positive number of FLOPs (got {c})")


def fit_groups(runs: pd.DataFrame, group: str | None, args: argparse.Namespace) -> dict:
    kwargs = dict(
        n_boot=args.bootstrap, seed=args.seed, budgets=args.budget,
        holdout_threshold=args.holdout_above, isoflop=getattr(args, "params", "") != "total",
    )  # fmt: skip
    if group is None:
        return fit_all(runs, **kwargs)
    if group not in runs.columns:
        raise InputError(f"--group: no column '{group}'; columns: {sorted(map(str, runs.columns))}")
    groups = {str(k): g for k, g in runs.groupby(group, sort=True)}
    for name, g in groups.items():  # validate every group before fitting any
        check_fittable(g, f"group {group}={name}")
    return {"group_by": group, "groups": {k: fit_all(g, **kwargs) for k, g in groups.items()}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m analysis.fit", description=__doc__)
    add_selection_args(parser)
    add_fit_args(parser)
    parser.add_argument("--group", help="fit each value of this column separately (e.g. arch)")
    parser.add_argument(
        "--params", choices=("nonembed", "total"), default="nonembed",
        help="N = non-embedding parameters (Kaplan et al. 2020; default) or all parameters "
             "(N_total, as Hoffmann et al. 2022 count them; C = 6 N_total D; approach 2 skipped)",
    )  # fmt: skip
    parser.add_argument("--out", required=True, help="path of the fit.json to write")
    args = parser.parse_args(argv)
    try:
        check_fit_args(args)
        runs = load_selected(args)
        frame = with_total_params(runs.frame) if args.params == "total" else runs.frame
        result = fit_groups(frame, args.group, args)
    except InputError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    result = {"source": runs.source, "params": args.params, **result}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(dumps(result))
    for name, res in result.get("groups", {"": result}).items():
        print(summary(res, f"{args.group}={name}" if name else runs.source))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
