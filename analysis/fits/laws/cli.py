"""`python -m analysis.fit --law NAME`: the glue between fit.py and the forms.

fit.json's other sections (approaches 1 and 2, Kaplan's single-variable laws, the
extrapolation check) do not depend on the form; only `parametric` is replaced by the chosen
one. The default `chinchilla` section is approach 3's (`"law": "chinchilla"`; a hand-written
section without `law` is read as chinchilla too). Every form's bootstrap replicates go next to fit.json
(`fit.replicates.csv`) for `analysis.fits.predict`.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

from analysis.data.compute_factor import of_runs
from analysis.data.load import InputError
from analysis.fits.laws import (
    DEFAULT,
    LAWS,
    check_columns,
    check_fittable,
    fit_law,
    get,
    replicates,
    replicates_path,
    section,
)


def add_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--law",
        choices=tuple(LAWS),
        default=DEFAULT,
        help="form of the parametric law: chinchilla (default; E + A/N^alpha + B/D^beta), "
        "kaplan (Kaplan et al. 2020 eq. 1.5), datablations (Muennighoff et al. 2023; "
        "needs a column U, unique tokens), overtrain (Gadre et al. 2024)",
    )


def groups(frame: pd.DataFrame, group: str | None) -> dict[str, pd.DataFrame]:
    """The frames fit.py fits: {"": frame}, or one per value of `group` (as `fit_groups`)."""
    if group is None:
        return {"": frame}
    return {str(k): g for k, g in frame.groupby(group, sort=True)}


def check(frame: pd.DataFrame, args: argparse.Namespace) -> None:
    """Before any work: the law's columns in every group, and options it cannot honour."""
    law = get(args.law)
    if law.name == DEFAULT:
        return
    if args.compute != "6nd":
        raise InputError(f"--law {law.name}: only --compute 6nd (its allocation is under C = 6ND)")
    if args.fixed and law.name != "datablations":
        raise InputError(f"--fix holds approach-3 parameters; --law {law.name} cannot use it")
    if args.group is not None and args.group not in frame.columns:
        return  # fit_groups names the missing column
    for name, g in groups(frame, args.group).items():
        check_columns(g, law, f"group {args.group}={name}" if name else "the runs")
        check_fittable(g, law, f"group {args.group}={name}" if name else "the runs")


def apply(frame: pd.DataFrame, args: argparse.Namespace, result: dict) -> dict[str, np.ndarray]:
    """Put the chosen form's section under `parametric` (in place, every group); returns
    {group: bootstrap thetas} for `write_replicates`. For the default form the replicates are
    recomputed with approach 3's own seed and counts, so they are the ones of its intervals."""
    law, out = get(args.law), {}
    results = result.get("groups", {"": result})
    for name, g in groups(frame, args.group).items():
        res = results[name]
        if law.name == DEFAULT:  # approach 3 is already fit.json's section: only its replicates
            out[name] = fit_law(law, g, args.bootstrap, args.seed, args.fixed)[2]
            continue
        res["parametric"], out[name] = section(
            law, g, res["budgets"], args.bootstrap, args.seed, fixed=args.fixed, k=of_runs(g)
        )
    return out


def write_replicates(
    out: Path, law_name: str, thetas: dict[str, np.ndarray], group: str | None
) -> Path:
    """fit.replicates.csv: one row per replicate (a `group` column when grouped)."""
    law = get(law_name)
    frames = [
        replicates(law, t).assign(**({"group": k} if group else {})) for k, t in thetas.items()
    ]
    path = Path(replicates_path(out))
    pd.concat(frames, ignore_index=True).to_csv(path, index=False)
    return path
