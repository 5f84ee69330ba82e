"""How good is a checkpoint's decay correction? Measured against runs that really decayed there.

    python -m benchmarks.checkpoint_check --csv runs.csv --curves curves.csv [--rtol 0.03] [--out F]

`analysis.tuning.curves.checkpoint_runs` turns a run's stable-phase point into the loss a run decayed
there would reach, by the group's curve law. Where a group (same model and hyperparameters)
also holds a run whose budget ends within `rtol` of a checkpoint's tokens, that run's measured
final loss is the answer: each such run is left out, the curve law is fitted on the rest of its
group, and the corrected checkpoints near its budget are compared with it. Tuning candidates
(`tune_role` candidate) are left out: their budgets are halving segments.

Exit code 2 with one line on stderr, and nothing written, when the input cannot be used.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

from analysis.data.load import InputError
from analysis.data.select import ArgumentParser, check_out_file
from analysis.fits.laws.base import Law
from analysis.fits.laws.curve import TISSUE
from analysis.tuning.curves import checkpoint_runs, groups, read_inputs

COLUMNS = ["run_id", "N", "D", "loss", "checkpoint", "checkpoint_D", "corrected", "rel_err"]


def checkpoint_errors(law: Law, runs: pd.DataFrame, points: pd.DataFrame, rtol: float = 0.03):
    """One row per (run, corrected checkpoint of its group within rtol of its tokens, the curve
    law fitted without the run): rel_err = corrected / measured - 1."""
    if "tune_role" in runs.columns:
        runs = runs[runs["tune_role"] != "candidate"]
    runs = runs.reset_index(drop=True)
    label = groups(runs)
    rows = []
    for i, run in runs.iterrows():
        others = runs[(label == label[i]) & (runs.index != i)]
        pseudo = checkpoint_runs(law, others, points) if len(others) else pd.DataFrame()
        if pseudo.empty:
            continue
        near = pseudo[(pseudo["D"] / float(run["D"]) - 1).abs() <= rtol]
        for p in near.to_dict("records"):
            rows.append(
                [run["run_id"], run["N"], run["D"], run["loss"], p["run_id"], p["D"], p["loss"]]
                + [p["loss"] / float(run["loss"]) - 1]
            )
    return pd.DataFrame(rows, columns=COLUMNS)


def markdown(errors: pd.DataFrame, rtol: float) -> str:
    if errors.empty:
        return (
            f"No run ends within {rtol:.0%} of a corrected checkpoint of its group: "
            "the correction cannot be checked on these runs.\n"
        )
    err = errors["rel_err"].abs()
    lines = [
        f"{len(errors)} corrected checkpoints against the measured final loss of a run of their "
        f"group ending within {rtol:.0%} of their tokens (curve law fitted without that run): "
        f"median |relative error| {100 * err.median():.2f}%, max {100 * err.max():.2f}%, "
        f"mean signed {100 * errors['rel_err'].mean():+.2f}%.",
        "",
        "| run | N | D | measured | checkpoint | its D | corrected | relative error |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in errors.itertuples():
        lines.append(
            f"| {str(r.run_id)[:8]} | {r.N:.0f} | {r.D:.0f} | {r.loss:.4f} | "
            f"{str(r.checkpoint)[:8]}@{str(r.checkpoint).rsplit('@', 1)[1]} | "
            f"{r.checkpoint_D:.0f} | {r.corrected:.4f} | {100 * r.rel_err:+.2f}% |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = ArgumentParser(
        prog="python -m benchmarks.checkpoint_check", description=__doc__.split("\n")[0]
    )
    ap.add_argument("--csv", required=True, help="runs.csv with the runs' config columns")
    ap.add_argument("--curves", required=True, help="curves.csv: run_id, tokens, val_loss")
    ap.add_argument(
        "--rtol", type=float, default=0.03, help="how near a run's tokens a checkpoint must be"
    )
    ap.add_argument("--out", help="write the markdown here (default: stdout)")
    args = ap.parse_args(argv)
    try:
        if not 0 <= args.rtol < 1:
            raise InputError(f"--rtol must be in [0, 1) (got {args.rtol})")
        if args.out:
            check_out_file(args.out)
        runs, points = read_inputs(args.csv, args.curves)
    except InputError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    text = markdown(checkpoint_errors(TISSUE, runs, points, args.rtol), args.rtol)
    if args.out:
        Path(args.out).write_text(text)
    else:
        print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
