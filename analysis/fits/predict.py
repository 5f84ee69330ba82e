"""Ask a fitted law a question: the loss at given (N, D[, U]), or the compute-optimal (N, D).

    python -m analysis.predict --fit fit.json --csv points.csv --out predictions.csv
    python -m analysis.predict --hparams --fit fit.json --C 1e21 --N 3e9   # lr, batch size there

With --hparams the question is the learning rate and batch size a hyperparameter law gives at
a budget (`analysis.tuning.hparam_predict`, which documents its options).

points.csv has columns N and D (and U, unique tokens, for `datablations`); C (= 6 N D, or
k 6 N D for a fit whose `parametric` section has a `k`: an encoder-decoder's runs,
`analysis.data.compute_factor`) may replace one of N, D. A file with C but neither N nor D asks for
the compute-optimal (N, D) at each C (at each C and U for `datablations`) and the loss there.
The prediction is written as `loss_pred` (with `loss_pred_lo`, `loss_pred_hi`) beside the
input's columns, so a measured `loss` stays next to it. The 95% interval is the percentile
interval over the fit's bootstrap replicates (`fit.replicates.csv` next to fit.json, written by
`analysis.fits.fit`): the uncertainty of the law, not the seed-to-seed spread of one run. A fit.json
written by hand, e.g. {"parametric": {"law": "kaplan", "alpha_N": 0.076, ...}}, predicts
without intervals, so a paper's law can be evaluated on your points.

Exit code 2 with one line on stderr, and nothing written, when the input cannot be used.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from analysis.data.load import InputError, check_text, read_fit_json
from analysis.data.select import ArgumentParser, check_out_file
from analysis.fits.bootstrap import percentile_interval
from analysis.fits.laws import Law, law_of, replicates_path
from analysis.tuning import hparam_predict


def load_fit(path: str, group: str | None = None) -> dict:
    """The `parametric` section of a fit.json (of one group when grouped), or the file itself
    when it is a bare section written by hand."""
    p = Path(path)
    data = read_fit_json(p)
    if "groups" in data:
        names = sorted(data["groups"])
        if group is None or group not in data["groups"]:
            raise InputError(
                f"--fit: {p} holds one fit per {data.get('group_by', 'group')}; "
                f"choose one with --group ({', '.join(names)})"
            )
        data = data["groups"][group]
    elif group is not None:
        raise InputError(f"--group {group}: {p} is not a grouped fit")
    section = data.get("parametric", data)
    if not isinstance(section, dict):
        raise InputError(f"--fit: {p} has no 'parametric' section")
    law = law_of(section)
    missing = [k for k in law.params if not _finite(section.get(k))]
    if missing:
        raise InputError(
            f"--fit: the {law.name} law needs finite {', '.join(law.params)}; "
            f"{p} lacks {', '.join(missing)}"
        )
    if section.get("compute", "6nd") != "6nd":
        raise InputError("--fit: predictions use C = 6ND; this fit's C counts exact FLOPs")
    return section


def _finite(v) -> bool:
    return isinstance(v, int | float) and np.isfinite(v)


def load_replicates(path: str | None, law: Law, group: str | None) -> np.ndarray | None:
    """(R, P) thetas of the bootstrap replicates, or None when there are none."""
    if path is None or not Path(path).is_file():
        return None
    check_text(Path(path), "--replicates")
    reps = pd.read_csv(path)
    if group is not None and "group" in reps.columns:
        reps = reps[reps["group"].astype(str) == group]
    missing = [k for k in law.params if k not in reps.columns]
    if missing:
        raise InputError(f"--replicates: {path} lacks column(s) {', '.join(missing)} of {law.name}")
    values = reps[list(law.params)].to_numpy(dtype=float)
    with np.errstate(all="ignore"):
        return np.column_stack(
            [np.log(values[:, i]) if log else values[:, i] for i, log in enumerate(law.log_scale)]
        )


def read_points(path: str, law: Law, k: float = 1.0) -> tuple[pd.DataFrame, bool]:
    """The points with N, D (and U) filled in (C = k 6 N D), and whether they ask for
    compute-optimal ones."""
    p = Path(path)
    if not p.is_file():
        raise InputError(f"--csv: no such file: {p}")
    check_text(p, "--csv")
    try:
        df = pd.read_csv(p)
    except (pd.errors.ParserError, pd.errors.EmptyDataError) as err:
        raise InputError(f"--csv: cannot read {p} as CSV: {err}".splitlines()[0]) from None
    have = [c for c in ("N", "D", "C", "U") if c in df.columns]
    for col in have:
        df[col] = pd.to_numeric(df[col], errors="coerce").astype(float)
        bad = ~(np.isfinite(df[col]) & (df[col] > 0))
        if bad.any():
            raise InputError(
                f"--csv: column '{col}' has {int(bad.sum())} missing, non-numeric or "
                "non-positive value(s)"
            )
    need_u = "U" in law.columns
    if need_u and "U" not in df.columns:
        raise InputError(
            f"--csv: the {law.name} law needs a column 'U' (unique tokens); "
            f"got {sorted(map(str, df.columns))}"
        )
    optimal = "C" in df.columns and "N" not in df.columns and "D" not in df.columns
    if not optimal:
        if "N" not in df.columns and {"C", "D"} <= set(df.columns):
            df["N"] = df["C"] / (6 * k * df["D"])
        if "D" not in df.columns and {"C", "N"} <= set(df.columns):
            df["D"] = df["C"] / (6 * k * df["N"])
        if not {"N", "D"} <= set(df.columns):
            raise InputError(
                "--csv: need columns N and D (C may replace one of them), or C "
                f"alone for compute-optimal points; got {sorted(map(str, df.columns))}"
            )
        df["C"] = 6 * k * df["N"] * df["D"]
        if need_u and (df["U"] > df["D"] * (1 + 1e-9)).any():
            i = int(np.flatnonzero(df["U"] > df["D"] * (1 + 1e-9))[0])
            raise InputError(
                f"--csv: column 'U' is larger than D in row {i} (U = {df['U'][i]:.4g}"
                f" > D = {df['D'][i]:.4g}); unique tokens cannot exceed tokens trained"
            )
    return df, optimal


def _band(samples: np.ndarray) -> np.ndarray:
    """(n, 2) percentile intervals of (R, n) samples (nan where there are none)."""
    out = np.full((samples.shape[1], 2), np.nan)
    for j in range(samples.shape[1]):
        ci = percentile_interval(samples[:, j])
        if ci is not None:
            out[j] = ci
    return out


def predict(
    section: dict, points: pd.DataFrame, optimal: bool, thetas: np.ndarray | None = None
) -> pd.DataFrame:
    """One row per point: the input's columns, C, the predicted loss `loss_pred` and its interval
    (`loss_pred_lo`, `loss_pred_hi`); for compute-optimal points also N, D and their intervals."""
    law = law_of(section)
    theta = law.to_theta({q: section[q] for q in law.params})
    k = section.get("k", 1.0)  # C = k 6ND: the 6ND optimum at C / k
    U = points["U"].to_numpy(float) if "U" in law.columns else None
    out = points.copy()

    def at(th: np.ndarray):
        """Per theta row: (N, D, loss) at the points, (R, n) each."""
        if optimal:
            C = points["C"].to_numpy(float)
            with np.errstate(all="ignore"):
                N, D = law.optimal(law.to_values(th), C / k, U)
            cols = {"N": N, "D": D} | ({"U": np.minimum(U[None, :], D)} if U is not None else {})
            loss = np.stack(
                [
                    law.predict(t, {c: v[r] for c, v in cols.items()})[0]
                    for r, t in enumerate(np.atleast_2d(th))
                ]
            )
            return N, D, loss
        cols = {c: points[c].to_numpy(float) for c in law.columns}
        return None, None, law.predict(th, cols)

    N, D, loss = at(theta)
    if optimal:
        out["N"], out["D"] = N[0], D[0]
    out["loss_pred"] = loss[0]  # beside the input's columns: a measured `loss` is kept
    names = ["loss_pred"] + (["N", "D"] if optimal else [])
    for name in names:
        out[f"{name}_lo"], out[f"{name}_hi"] = np.nan, np.nan
    if thetas is not None and len(thetas):
        reps = dict(zip(("N", "D", "loss_pred"), at(thetas)))
        for name in names:
            band = _band(reps[name])
            out[f"{name}_lo"], out[f"{name}_hi"] = band[:, 0], band[:, 1]
    out.insert(0, "law", law.name)
    out["compute_optimal"] = optimal
    return out


def main(argv: list[str] | None = None) -> int:
    if "--hparams" in (sys.argv[1:] if argv is None else argv):
        return hparam_predict.main(argv)
    parser = ArgumentParser(
        prog="python -m analysis.predict",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--fit", required=True, help="fit.json (or a hand-written section)")
    parser.add_argument("--csv", required=True, help="points: N, D (U); C may replace one")
    parser.add_argument("--out", required=True, help="predictions CSV to write")
    parser.add_argument("--group", help="the group of a grouped fit.json (fit --group)")
    parser.add_argument(
        "--replicates",
        help="bootstrap replicates (default: fit.replicates.csv next to fit.json, when present)",
    )
    args = parser.parse_args(argv)
    try:
        check_out_file(args.out)
        section = load_fit(args.fit, args.group)
        law = law_of(section)
        points, optimal = read_points(args.csv, law, section.get("k", 1.0))
        if args.replicates and not Path(args.replicates).is_file():
            raise InputError(f"--replicates: no such file: {args.replicates}")
        thetas = load_replicates(args.replicates or replicates_path(args.fit), law, args.group)
        result = predict(section, points, optimal, thetas)
    except InputError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    result.to_csv(out, index=False)
    print(result.to_string(index=False, float_format=lambda v: f"{v:.5g}"))
    print(
        f"wrote {out} ({'no interval: no replicates' if thetas is None else f'{len(thetas)} replicates'})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
