"""Which law predicts best? Every form the columns allow, judged on runs it was not fitted on.

    python -m analysis.compare_laws --csv runs.csv [--holdout-above C | --rollout] [--out DIR]

Hold-out (default): fit every law on the runs with C below the threshold (default: below the
largest compute budget, as fit.json's extrapolation check) and predict the rest. `--rollout`:
an expanding window over compute budgets, as OLMo-core's ladder evaluation: fit on every
budget up to one, predict the next, for each budget in turn; errors are averaged over windows.
Each law reports its mean and worst |relative error| on the held-out runs with 95% intervals
(refitting every bootstrap resample of the training runs), and its number of parameters, so a
law that predicts as well with fewer parameters can be preferred. Writes compare_laws.md,
.csv, .json and a figure to --out.

Exit code 2 with one line on stderr, and nothing written, when the input cannot be used.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from analysis.data.load import InputError, check_text
from analysis.data.select import ArgumentParser, add_selection_args, check_out_dir, load_selected
from analysis.fits.bootstrap import percentile_interval
from analysis.fits.fit import default_holdout_threshold, jsonable
from analysis.fits.isoflop import budget_groups
from analysis.fits.laws import LAWS, Law, check_columns, check_fittable, fit_law
from analysis.fits.laws.curve import TISSUE
from analysis.tuning.curves import check_curve_inputs, checkpoint_runs


def applicable(runs: pd.DataFrame) -> list[Law]:
    """The forms whose columns the runs have (datablations needs U)."""
    return [law for law in LAWS.values() if all(c in runs.columns for c in law.columns)]


def _errors(law: Law, theta: np.ndarray, test: pd.DataFrame) -> np.ndarray:
    """(R, n_test) relative errors (predicted - measured) / measured."""
    cols = {k: test[k].to_numpy(float) for k in law.columns}
    y = test["loss"].to_numpy(float)
    return (law.predict(theta, cols) - y) / y


def window(law: Law, train: pd.DataFrame, test: pd.DataFrame, n_boot: int, seed: int) -> dict:
    """Fit on `train`, predict `test`: per-run errors, and per-replicate mean and worst."""
    check_fittable(train, law, "the training runs")
    check_columns(train, law, "the training runs")
    theta, _, thetas, _ = fit_law(law, train, n_boot, seed)
    rel = _errors(law, theta, test)[0]
    with np.errstate(invalid="ignore"):
        reps = np.abs(_errors(law, thetas, test))
    return {
        "rel_error": rel,
        "mean": float(np.mean(np.abs(rel))),
        "worst": float(np.max(np.abs(rel))),
        "rep_mean": reps.mean(axis=1),
        "rep_worst": reps.max(axis=1),
        "params": dict(zip(law.params, (float(v[0]) for v in law.to_values(theta).values()))),
    }


def splits(runs: pd.DataFrame, threshold: float | None, rollout: bool):
    """[(train, test)]: one hold-out split, or one per budget of the expanding window."""
    if not rollout:
        t = default_holdout_threshold(runs) if threshold is None else threshold
        return [(runs[runs["C"] < t], runs[runs["C"] >= t])]
    labels = budget_groups(runs["C"])
    return [(runs[labels < k], runs[labels == k]) for k in np.unique(labels)[1:]]


def compare(
    runs: pd.DataFrame,
    threshold: float | None = None,
    rollout: bool = False,
    n_boot: int = 200,
    seed: int = 0,
    laws: list[Law] | None = None,
) -> dict:
    """{"mode", "rows": [per law: n_params, mean, worst with ci95, windows], "runs": [...]}."""
    laws = applicable(runs) if laws is None else laws
    parts = splits(runs, threshold, rollout)
    if not any(len(test) for _, test in parts):
        raise InputError("no runs at or above the hold-out threshold")
    rows, per_run = [], []
    for law in laws:
        done, skipped = _windows(law, parts, n_boot, seed)
        rows.append(_error_row(law, done, skipped))
        per_run += _per_run_errors(law, done)
    if rows and all("skipped" in r for r in rows):  # nothing was compared: not a result
        raise InputError(f"no law could be fitted to {len(runs)} run(s): {rows[0]['skipped']}")
    return {
        "mode": "rollout" if rollout else "holdout",
        "n_boot": n_boot,
        "rows": rows,
        "runs": per_run,
    }


def read_curves(path: str, runs: pd.DataFrame, runs_from: str) -> pd.DataFrame:
    """The curves' points, checked before any fit: a file with the columns a curve law reads,
    for runs whose lr can be replayed (else every checkpoint is silently left out)."""
    if not Path(path).is_file():
        raise InputError(f"--curves: no such file: {path}")
    check_text(Path(path), "--curves")
    try:
        points = pd.read_csv(path)
    except (pd.errors.ParserError, pd.errors.EmptyDataError) as err:
        raise InputError(f"--curves: cannot read {path} as CSV: {err}".splitlines()[0]) from None
    check_curve_inputs(runs, points, runs_from, f"--curves {path}")
    return points


def with_checkpoints(result: dict, runs: pd.DataFrame, points: pd.DataFrame, laws, **split):
    """`result` with one more row per law: the same windows, each training set extended by its
    runs' stable-phase checkpoints, corrected for the missing decay by the curve law
    (`analysis.tuning.curves.checkpoint_runs`); the held-out runs are the same. Each +checkpoints row
    is judged on the windows its final-only row was fitted in, so both average the same
    held-out runs; a window that only the checkpoints make fittable is listed, not averaged."""
    extended = []
    for train, test in splits(runs, split.get("threshold"), split.get("rollout", False)):
        extra = checkpoint_runs(TISSUE, train, points)
        extended.append((pd.concat([train, extra], ignore_index=True), test, len(extra)))
    for law in laws:
        fitted = {r["train_below_C"] for r in result["runs"] if r["law"] == law.name}
        same = [e for e in extended if not e[1].empty and float(e[1]["C"].min()) in fitted]
        only = [
            f"C < {test['C'].min():.3g}: not compared (the final-only fit failed there)"
            for _, test, _ in extended
            if not test.empty and float(test["C"].min()) not in fitted
        ]
        done, skipped = _windows(
            law, [(t, h) for t, h, _ in same], result["n_boot"], split.get("seed", 0)
        )
        name = f"{law.name}+checkpoints"
        row = {**_error_row(law, done, skipped + only), "law": name}
        if same:  # per window, as "train runs"; 0 only where no window gained one
            row["n_checkpoints"] = float(np.mean([n for *_, n in same]))
        result["rows"].append(row)
        result["runs"] += _per_run_errors(law, done, name)
    return result


def _windows(law: Law, parts, n_boot: int, seed: int) -> tuple[list, list[str]]:
    """`law` fitted in each (train, test) window: the done ones and why the others failed."""
    done, skipped = [], []
    for train, test in parts:
        if test.empty:
            continue
        try:
            done.append((train, test, window(law, train, test, n_boot, seed)))
        except (InputError, ValueError) as err:
            skipped.append(f"C < {test['C'].min():.3g}: {err}")
    return done, skipped


def _error_row(law: Law, done: list, skipped: list[str]) -> dict:
    """The law's row: mean, median-window and worst relative error over its windows, with CIs."""
    row = {"law": law.name, "n_params": law.n_params, "windows": len(done)}
    if not done:
        return {**row, "skipped": "; ".join(skipped)}
    rep_mean = np.mean([w["rep_mean"] for *_, w in done], axis=0)
    rep_worst = np.max([w["rep_worst"] for *_, w in done], axis=0)
    row.update(
        n_train=int(np.mean([len(t) for t, *_ in done])),
        n_test=int(sum(len(t) for _, t, _ in done)),
        mean_rel_error=float(np.mean([w["mean"] for *_, w in done])),
        # one window whose fit runs off (e.g. Kaplan's form on 17 runs) dominates the mean
        median_window_rel_error=float(np.median([w["mean"] for *_, w in done])),
        worst_rel_error=float(np.max([w["worst"] for *_, w in done])),
        ci95={
            "mean_rel_error": percentile_interval(rep_mean),
            "worst_rel_error": percentile_interval(rep_worst),
        },
        params=done[-1][2]["params"],
    )
    if skipped:
        row["skipped_windows"] = skipped
    return row


def _per_run_errors(law: Law, done: list, name: str | None = None) -> list[dict]:
    """One record per held-out run of each window: its loss and the law's relative error
    (`name`: the row's label, e.g. "chinchilla+checkpoints"; default the law's)."""
    return [
        {
            "law": name or law.name,
            "train_below_C": float(test["C"].min()),
            "run_id": r,
            "N": n,
            "D": d,
            "C": c,
            "loss": y,
            "rel_error": e,
        }
        for _, test, w in done
        for r, n, d, c, y, e in zip(
            test["run_id"], test["N"], test["D"], test["C"], test["loss"], w["rel_error"]
        )
    ]


def caveats(result: dict) -> list[str]:
    """What the table cannot show: a ranking on a single held-out run, +checkpoints rows
    without a checkpoint."""
    none = [r["law"] for r in result["rows"] if r.get("n_checkpoints") == 0]
    lines = (
        [
            f"{', '.join(none)}: no stable-phase checkpoint could be corrected for its missing decay "
            "(no group of runs with more curve points than the curve law's parameters and some "
            "annealing): these rows are the final-only fits"
        ]
        if none
        else []
    )
    held = {(r["train_below_C"], r["run_id"]) for r in result["runs"]}
    per_window: dict[float, int] = {}
    for below, _ in held:
        per_window[below] = per_window.get(below, 0) + 1
    single = sorted(c for c, n in per_window.items() if n == 1)
    if not single:
        return lines
    if result["mode"] == "holdout":
        return lines + [
            "the hold-out set has a single run: the laws are ranked on one point, which "
            "a seed's noise can reorder; hold out more runs (--holdout-above a lower C)"
        ]
    return lines + [
        f"{len(single)} of {len(per_window)} windows hold out a single run (budgets at C >= "
        f"{', '.join(f'{c:.3g}' for c in single)}): each ranks the laws on one point"
    ]


def _pct(v, ci=None) -> str:
    text = f"{100 * v:.3g}%"
    return text + (f" [{100 * ci[0]:.3g}, {100 * ci[1]:.3g}]" if ci else " [no interval]")


def markdown(result: dict) -> str:
    """The comparison table (also for `analysis.report`: call this on `compare(runs)`)."""
    rollout = result["mode"] == "rollout"
    how = (
        "expanding window over compute budgets: mean and worst over every window, and the "
        "median of the windows' mean errors (number of windows)"
        if rollout
        else "fit below the hold-out threshold"
    )
    lines = [
        f"Laws compared on held-out runs ({how}; 95% intervals from "
        f"{result['n_boot']} bootstrap refits of the training runs):",
        "",
        "| law | parameters | train runs | held-out runs | mean abs. relative error | worst |"
        + (" median over windows |" if rollout else ""),
        "|---|---|---|---|---|---|" + ("---|" if rollout else ""),
    ]
    for r in result["rows"]:
        if "skipped" in r:
            lines.append(
                f"| {r['law']} | {r['n_params']} | - | - | skipped: {r['skipped']} | - |"
                + (" - |" if rollout else "")
            )
            continue
        lines.append(
            f"| {r['law']} | {r['n_params']} | {r['n_train']} | {r['n_test']} | "
            f"{_pct(r['mean_rel_error'], r['ci95']['mean_rel_error'])} | "
            f"{_pct(r['worst_rel_error'], r['ci95']['worst_rel_error'])} |"
            + (f" {100 * r['median_window_rel_error']:.3g}% ({r['windows']}) |" if rollout else "")
        )
    lines += [f"\nWarning: {w}." for w in caveats(result)]
    return "\n".join(lines) + "\n"


MIN_TRAIN_RUNS = 10  # below this a 4-7 parameter law has too few spare points to judge


def report_blocks(
    runs: pd.DataFrame, n_boot: int = 200, seed: int = 0, threshold: float | None = None
) -> list[tuple]:
    """The comparison as `analysis.report` blocks (h2, p, table), or [] when the runs are too
    few: no held-out runs above the threshold (default: fit.py's) or fewer than MIN_TRAIN_RUNS
    below it. `analysis.report` places them after its fits."""
    train, test = splits(runs, threshold, False)[0]
    if test.empty or len(train) < MIN_TRAIN_RUNS:
        return []
    result = compare(runs, threshold, False, n_boot, seed)
    rows = []
    for r in result["rows"]:
        if "skipped" in r:
            rows.append([r["law"], r["n_params"], "skipped: " + r["skipped"], ""])
        else:
            rows.append(
                [
                    r["law"],
                    r["n_params"],
                    _pct(r["mean_rel_error"], r["ci95"]["mean_rel_error"]),
                    _pct(r["worst_rel_error"], r["ci95"]["worst_rel_error"]),
                ]
            )
    return [
        ("h2", "Laws compared on held-out runs"),
        (
            "p",
            f"Every law the columns allow, fitted on the {len(train)} runs below "
            f"C = {test['C'].min():.3g} and judged on the {len(test)} above; 95% intervals "
            f"from {n_boot} bootstrap refits of the training runs."
            + (
                " Only one run is held out: the ranking rests on a single point."
                if len(test) == 1
                else ""
            ),
        ),
        ("table", ["law", "parameters", "mean |relative error|", "worst |relative error|"], rows),
    ]


def _parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog="python -m analysis.compare_laws",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_selection_args(parser)
    split = parser.add_mutually_exclusive_group()
    split.add_argument("--holdout-above", type=float, help="fit below this C, predict the rest")
    split.add_argument("--rollout", action="store_true", help="expanding window over budgets")
    parser.add_argument(
        "--law",
        action="append",
        choices=tuple(LAWS),
        help="compare only these (repeatable; default: every law the columns allow)",
    )
    parser.add_argument(
        "--curves",
        help="curves.csv of the runs: also fit every law with the runs' stable-phase "
        "checkpoints, corrected for the missing decay by the Tissue et al. curve law",
    )
    parser.add_argument("--bootstrap", type=int, default=200, help="bootstrap refits per law")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="compare_laws", help="folder for the table and figure")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        if args.bootstrap < 10:
            raise InputError(f"--bootstrap must be at least 10 (got {args.bootstrap})")
        if args.holdout_above is not None and not 0 < args.holdout_above < np.inf:
            raise InputError(f"--holdout-above must be a positive C (got {args.holdout_above})")
        if args.seed < 0:
            raise InputError(f"--seed must be a non-negative integer (got {args.seed})")
        check_out_dir(args.out)
        selected = load_selected(args)
        runs = selected.frame
        laws = [LAWS[k] for k in dict.fromkeys(args.law)] if args.law else applicable(runs)
        for law in laws:
            check_columns(runs, law)
        points = read_curves(args.curves, runs, f"runs {selected.source}") if args.curves else None
        result = compare(runs, args.holdout_above, args.rollout, args.bootstrap, args.seed, laws)
        if points is not None:
            split = dict(threshold=args.holdout_above, rollout=args.rollout, seed=args.seed)
            result = with_checkpoints(result, runs, points, laws, **split)
    except InputError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    from analysis.report import plots  # lazy: seaborn ~3 s, only once the input is valid

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    table = markdown(result)
    (out / "compare_laws.md").write_text(table)
    (out / "compare_laws.json").write_text(json.dumps(jsonable(result), indent=2) + "\n")
    flat = [
        {k: v for k, v in r.items() if k not in ("ci95", "params", "skipped_windows")}
        | {f"{k}_ci95": r["ci95"][k] for k in r.get("ci95", {})}
        for r in result["rows"]
    ]
    pd.DataFrame(flat).to_csv(out / "compare_laws.csv", index=False)
    written = ["md", "csv", "json"]
    if any("skipped" not in r for r in result["rows"]):  # a figure of nothing is not written
        plots.setup()
        figures = plots.save(plots.law_errors(result), out, "compare_laws")
        written += [path.suffix.lstrip(".") for path in figures]
    for line in caveats(result):
        print(f"warning: {line}", file=sys.stderr)
    print(table + f"wrote {out}/compare_laws.{{{','.join(written)}}}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
