"""Fit every scaling law the data support; CLI writes fit.json and prints a summary.

    python -m analysis.fit --csv runs.csv [--group arch] [--bootstrap 1000] [--seed 0] --out fit.json
    python -m analysis.fit --experiment NAME [--sweep ID] [--tracking-uri URI] --out fit.json
    python -m analysis.fit --csv runs.csv --tune train.lr [--tune train.warmup] --out fit.json

--tune KEY: the runs are a tuned sweep; per arm (variant x N x D, or the runs' `arm` column) the
run at the lowest final loss is kept and every law is fitted to those (analysis/tuning.py).

--csv, --experiment and --sweep are repeatable: the runs of every source are fitted together.

Exit code 2 with one line on stderr, and nothing written, when the input cannot be fitted.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from analysis.data import compute_factor
from analysis.data.families import check_one_family, with_family
from analysis.data.load import InputError, with_total_params
from analysis.data.select import ArgumentParser, add_selection_args, check_out_file, load_selected
from analysis.fits import laws as law_forms  # --law: the parametric form (analysis/fits/laws/)
from analysis.fits.fit import FitOptions, check_exact_compute, dumps, fit_all
from analysis.fits.laws import chinchilla
from analysis.fits.laws import cli as law_cli
from analysis.fits.summary import summary
from analysis.tuning import arms as tuning


def add_fit_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bootstrap", type=int, default=1000, help="bootstrap replicates")
    parser.add_argument("--seed", type=int, default=0, help="bootstrap seed")
    parser.add_argument(
        "--budget",
        type=float,
        action="append",
        help="compute budget (FLOPs) for N_opt/D_opt; repeatable (default: max C and 100x)",
    )
    parser.add_argument("--holdout-above", type=float, help="extrapolation threshold C")
    parser.add_argument(
        "--compute",
        choices=("6nd", "exact"),
        default="6nd",
        help="what C counts: 6nd = 6 N D (default; Kaplan/Chinchilla) or exact = the runs' "
        "exact training FLOPs (column C_exact: head, embedding side, attention included)",
    )
    parser.add_argument(
        "--tune",
        action="append",
        default=[],
        metavar="KEY",
        help="a tuned hyperparameter column (e.g. train.lr); repeatable: per arm the run at the "
        "lowest final loss is kept and the laws are fitted to those only",
    )
    parser.add_argument(
        "--fix",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="hold an approach-3 parameter fixed instead of fitting it, e.g. --fix E=1.7 "
        f"(one of {', '.join(chinchilla.THETA)}); repeatable",
    )


def parse_fixed(items: list[str]) -> dict[str, float]:
    """['E=1.7'] -> {'E': 1.7}; one clear line for anything else."""
    fixed: dict[str, float] = {}
    for item in items:
        name, sep, value = item.partition("=")
        name = name.strip()
        if not sep or name not in chinchilla.THETA:
            raise InputError(
                f"--fix {item}: expected NAME=VALUE with NAME one of {', '.join(chinchilla.THETA)}"
            )
        try:
            number = float(value)
        except ValueError:
            raise InputError(f"--fix {item}: '{value}' is not a number") from None
        log_scale = chinchilla.LAW.is_log(name)
        if not np.isfinite(number) or (log_scale and number <= 0) or number < 0:
            raise InputError(f"--fix {item}: {name} must be a finite, positive number")
        if name in fixed:
            raise InputError(f"--fix: {name} given twice")
        fixed[name] = number
    return fixed


def check_fit_args(args: argparse.Namespace) -> None:
    if args.bootstrap < 10:
        raise InputError(f"--bootstrap must be at least 10 (got {args.bootstrap})")
    args.fixed = parse_fixed(getattr(args, "fix", []) or [])
    for c in args.budget or []:
        if not 0 < c < np.inf:
            raise InputError(f"--budget must be a positive number of FLOPs (got {c})")
    threshold = getattr(args, "holdout_above", None)
    if threshold is not None and not 0 < threshold < np.inf:
        raise InputError(f"--holdout-above must be a positive C (got {threshold})")
    if args.seed < 0:
        raise InputError(f"--seed must be a non-negative integer (got {args.seed})")


def fit_groups(runs: pd.DataFrame, group: str | None, args: argparse.Namespace) -> dict:
    law = law_forms.get(getattr(args, "law", law_forms.DEFAULT))  # whose minimum of runs applies
    tuned, grid = None, None
    if getattr(args, "tune", None):
        grid = runs
        runs, tuned = tuning.select(runs, args.tune)  # the arms' results: every fit uses them
    options = FitOptions.from_args(
        args,
        isoflop=getattr(args, "params", "") != "total",
        parametric=law.name == law_forms.DEFAULT,
    )
    runs = with_family(runs)  # losses of different families' objectives never share a law
    if group is None:
        check_one_family(runs, "the selection", "fit one law per family with --group family")
        compute_factor.of_runs(runs, "the selection")  # one k: before any work
        if args.compute == "exact":
            check_exact_compute(runs)  # before any work
        if law.name != law_forms.DEFAULT:  # the arms kept by --tune: still enough for the law
            law_forms.check_fittable(runs, law, "the selection")
        return fit_all(runs, options, tuned=tuned, grid_runs=grid).as_dict()
    if group not in runs.columns:
        raise InputError(f"--group: no column '{group}'; columns: {sorted(map(str, runs.columns))}")
    groups = {str(k): g for k, g in runs.groupby(group, sort=True)}
    for name, g in groups.items():  # validate every group before fitting any
        check_one_family(g, f"group {group}={name}", "use --group family")
        compute_factor.of_runs(g, f"group {group}={name}")
        law_forms.check_fittable(g, law, f"group {group}={name}")
        if args.compute == "exact":
            check_exact_compute(g)
    fitted = {
        k: fit_all(g, options, tuned=tuned, grid_runs=grid).as_dict() for k, g in groups.items()
    }
    return {"group_by": group, "groups": fitted}


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m analysis.fit", description=__doc__)
    add_selection_args(parser)
    add_fit_args(parser)
    parser.add_argument("--group", help="fit each value of this column separately (e.g. arch)")
    parser.add_argument(
        "--params",
        choices=("nonembed", "active", "total"),
        default="nonembed",
        help="N = non-embedding parameters one token passes through (Kaplan et al. 2020; "
        "default; for a MoE run its active ones, C = 6 N_active D; 'active' is the same) or all "
        "parameters (N_total, as Hoffmann et al. 2022 count them, every expert of a MoE run "
        "included; C = 6 N_total D; approach 2 skipped)",
    )
    parser.add_argument("--out", required=True, help="path of the fit.json to write")
    law_cli.add_args(parser)
    args = parser.parse_args(argv)
    try:
        check_fit_args(args)
        check_out_file(args.out)
        runs = load_selected(args)
        frame = with_total_params(runs.frame) if args.params == "total" else runs.frame
        frame = with_family(frame)  # --group family
        law_cli.check(frame, args)  # --law: its columns, before any work
        result = fit_groups(frame, args.group, args)
        replicates = law_cli.apply(frame, args, result)  # --law: its parametric section(s)
    except InputError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    result = {"source": runs.source, "params": args.params, **result}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(dumps(result))
    law_cli.write_replicates(out, args.law, replicates, args.group)  # for analysis.predict
    for name, res in result.get("groups", {"": result}).items():
        print(summary(res, f"{args.group}={name}" if name else runs.source))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
