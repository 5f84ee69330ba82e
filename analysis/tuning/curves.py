"""Loss-curve laws on logged curves: fit, predict a run's final loss from part of its curve,
measure that prediction, and tune from partial curves.

    python -m analysis.curves --csv results/demo/runs.csv --curves results/demo/curves.csv \
        [--law tissue] [--out results/demo/curve_errors.md]

A curve's points are a run's val_loss at eval points, or its train_loss at every logged step
where the val points are too sparse (`--metric`, `choose_metric`; `analysis.data.load.load_curves`
exports both); the lr of
every step before a point is replayed from the run's config columns (`analysis.tuning.schedule_replay`).
One law per group of runs that share a model and its hyperparameters (`GROUP_KEYS`): the runs
of a group differ only in their schedule (token budget, decay), which is what the law models.

- `predict_final`: the group's points up to k of a run's tokens, fitted, predict the run's
  final loss under its own schedule, or any other (`schedule_replay.with_schedule`), with a 95%
  percentile interval over bootstrap refits (points resampled within each run).
- `prediction_errors`: that prediction against the measured final loss at k = 25/50/75%.
- `checkpoint_runs`: every run's stable-phase points as pseudo-runs for the N, D laws.

Curve-aware tuning from partial curves is `analysis.tuning.curve_tuning` (checked offline by
`python -m analysis.tuning_check --strategy curve`).

Exit code 2 with one line on stderr, and nothing written, when the input cannot be used.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from analysis.data.load import InputError
from analysis.data.select import ArgumentParser, check_out_file
from analysis.fits import identification, law_check
from analysis.fits.bootstrap import intervals, percentile_interval, resample_counts
from analysis.fits.laws.base import Law, bootstrap, fit, one_thread
from analysis.fits.laws.curve import CURVE_LAWS, features
from analysis.tuning.schedule_replay import lrs_of, total_steps, warmup_steps

SCHEDULE_KEYS = ("train.lr", "train.tokens", "train.batch_tokens", "train.schedule")
GROUP_KEYS = ("variant", "N", "seed", "train.lr", "train.warmup", "train.weight_decay")
KS = (0.25, 0.5, 0.75)
N_BOOT = 100


METRICS = ("val_loss", "train_loss")
# Fewer val points than this per run (a 4-parameter law plus one) and `metric="auto"` fits the
# train loss instead, when the curves have it (curves.csv from a dense export).
MIN_VAL_POINTS = 5
FINAL_TRAIN_POINTS = 10  # a train-loss curve's final loss: the mean of its last 10 points


@dataclass
class Curve:
    """One run's points: steps (n,), losses (n,), the lr of each of its steps, its warmup, and
    which loss the points are (`val_loss` or `train_loss`)."""

    run_id: str
    row: dict
    steps: np.ndarray
    loss: np.ndarray
    lrs: np.ndarray
    warmup: int
    metric: str = "val_loss"

    @property
    def total(self) -> int:
        return self.lrs.size


def replayable(runs: pd.DataFrame) -> bool:
    return all(k in runs.columns for k in SCHEDULE_KEYS)


def choose_metric(points: pd.DataFrame, metric: str = "auto") -> str:
    """`val_loss` or `train_loss`: as asked, or (`auto`) the val loss unless its runs have a
    median of fewer than MIN_VAL_POINTS points and the curves hold a train loss."""
    if metric != "auto":
        return metric
    has_train = "train_loss" in points.columns and points["train_loss"].notna().any()
    per_run = points.dropna(subset=["val_loss"]).groupby("run_id").size()
    sparse = per_run.empty or per_run.median() < MIN_VAL_POINTS
    return "train_loss" if sparse and has_train else "val_loss"


def metric_note(points: pd.DataFrame, metric: str) -> str:
    """One line saying which loss the curve laws were fitted to, and why."""
    per_run = points.dropna(subset=[metric]).groupby("run_id").size() if metric in points else []
    median = int(np.median(per_run)) if len(per_run) else 0
    if metric == "train_loss":
        return (
            f"Curves: the train loss (median {median} points per run; the val loss is too sparse "
            "to fit): a point logged after step s is the loss of batch s, so of the model after "
            "s - 1 updates."
        )
    return f"Curves: the val loss at eval points (median {median} points per run)."


def curves_of(runs: pd.DataFrame, points: pd.DataFrame, metric: str = "val_loss") -> dict:
    """{run_id: Curve} of every run with points of `metric` and a replayable schedule. A train
    loss logged at step s was computed before update s, so its point sits after s - 1 steps."""
    out = {}
    if metric not in points.columns:
        return out
    by_run = dict(tuple(points.groupby("run_id", sort=False)))
    shift = 1 if metric == "train_loss" else 0
    for row in runs.to_dict("records"):
        pts = by_run.get(row["run_id"])
        if pts is None or not np.isfinite(float(row.get("train.lr", np.nan))):
            continue
        pts = pts.sort_values(
            "tokens", kind="stable"
        )  # a curve is in step order, whatever the file's
        lrs = lrs_of(row)
        loss = pd.to_numeric(pts[metric], errors="coerce").to_numpy(float)
        steps = (pts["tokens"].to_numpy(float) / float(row["train.batch_tokens"])).round() - shift
        keep = (steps >= 1) & (steps <= lrs.size) & np.isfinite(loss)
        warm = warmup_steps(float(row.get("train.warmup", 0.0)), total_steps(row))
        out[row["run_id"]] = Curve(
            row["run_id"], row, steps[keep].astype(int), loss[keep], lrs, warm, metric
        )
    return out


def groups(runs: pd.DataFrame) -> pd.Series:
    """A label per run: runs with one label share the model and its hyperparameters."""
    keys = [k for k in GROUP_KEYS if k in runs.columns]
    return runs[keys].astype(str).agg("|".join, axis=1)


def stack(law: Law, parts: list[dict]) -> dict[str, np.ndarray]:
    """Columns of several runs' points as one set ((n, K) columns padded to one width)."""
    out = {}
    for k in law.columns:
        arrays = [p[k] for p in parts]
        if arrays[0].ndim == 1:
            out[k] = np.concatenate(arrays)
            continue
        width = max(a.shape[1] for a in arrays)
        fill = 1.0 if k == "eta" else 0.0
        out[k] = np.vstack(
            [np.pad(a, ((0, 0), (0, width - a.shape[1])), constant_values=fill) for a in arrays]
        )
    return out


def seen(law: Law, curves: list[Curve], upto_tokens: float | None = None):
    """(columns, loss, run index per point) of the curves' points at or before a token count."""
    parts, losses, owner = [], [], []
    for i, c in enumerate(curves):
        bt = float(c.row["train.batch_tokens"])
        mask = np.ones(c.steps.size, bool) if upto_tokens is None else c.steps * bt <= upto_tokens
        if mask.any():
            parts.append(features(law.name, c.lrs, c.steps[mask], c.warmup))
            losses.append(c.loss[mask])
            owner.append(np.full(int(mask.sum()), i))
    if not parts:
        return None, np.zeros(0), np.zeros(0, int)
    return stack(law, parts), np.concatenate(losses), np.concatenate(owner)


@dataclass
class CurveFit:
    law: Law
    theta: np.ndarray  # (P,)
    thetas: np.ndarray  # (R, P), nan where a refit did not converge
    converged: np.ndarray  # (R,)
    n_points: int
    loss_min: float
    check: dict | None = None  # the law against the points it was fitted to (`point_check`)

    def predict(self, lrs: np.ndarray, step, warmup: int) -> tuple[float, list | None]:
        """Loss after `step` steps of a run with lr `lrs` (several steps: their mean): the
        estimate and a 95% interval."""
        cols = features(self.law.name, lrs, np.atleast_1d(step), warmup)
        point = float(self.law.predict(self.theta, cols)[0].mean())
        if not self.thetas.size:
            return point, None
        ok = np.all(np.isfinite(self.thetas), axis=1)
        band = self.law.predict(self.thetas[ok], cols).mean(axis=1) if ok.any() else np.zeros(0)
        return point, percentile_interval(band)


def fit_curves(law: Law, curves: list[Curve], upto=None, n_boot: int = 0, seed: int = 0):
    """The law fitted to the curves' points up to `upto` tokens (bootstrap: points resampled
    within each run); None unless there are more points than parameters."""
    cols, loss, owner = seen(law, curves, upto)
    if loss.size <= law.n_params:
        return None
    with one_thread():
        point = fit(law, cols, loss)
        thetas, converged = np.zeros((0, law.n_params)), np.zeros(0, bool)
        if n_boot and np.all(np.isfinite(point.theta)):
            counts = resample_counts(loss.size, n_boot, seed, strata=owner)
            starts = np.vstack([point.theta[None, :], law.bootstrap_starts()])
            thetas, converged = bootstrap(law, cols, loss, counts, starts)
    check = point_check(law, point.theta, cols, loss, owner)
    return CurveFit(law, point.theta, thetas, converged, int(loss.size), float(loss.min()), check)


def step_noise(loss: np.ndarray, owner: np.ndarray) -> np.ndarray:
    """Each point's noise: its run's step-to-step scatter, the median absolute difference of
    successive points / (0.6745 sqrt 2) (a robust sd that a smooth trend barely moves)."""
    out = np.full(loss.size, np.nan)
    for i in np.unique(owner):
        at = owner == i
        d = np.diff(loss[at])
        out[at] = np.median(np.abs(d)) / (0.6745 * np.sqrt(2)) if d.size else np.nan
    return out


def point_check(law: Law, theta: np.ndarray, cols: dict, loss, owner) -> dict | None:
    """`analysis.fits.law_check` of the fitted law against its own points, each against its run's
    step noise; None where the fit failed or a run's noise is unknown (one point)."""
    noise = step_noise(loss, owner)
    if not np.all(np.isfinite(theta)) or not np.all(noise > 0):
        return None
    pred = law.predict(theta, cols)[0]
    labels = [f"run {i}, point {j}" for j, i in enumerate(owner)]
    result = law_check.check(loss, pred, noise, labels)
    return {**result, "sentence": law_check.verdict(f"the {law.name} law", result)}


def section(cf: CurveFit) -> dict:
    """Parameters, 95% intervals and identification flags of a curve fit, as fit.json writes
    a law's."""
    law = cf.law
    point = {k: float(v[0]) for k, v in law.to_values(cf.theta).items()}
    ci = intervals(law.to_values(cf.thetas)) if cf.thetas.size else {}
    why = identification.law_reasons(law, point, ci, cf.converged, cf.loss_min)
    if cf.check is not None and not cf.check["describes"]:
        why = {k: f"the law does not describe its curves ({cf.check['sentence']})" for k in point}
    return {
        "law": law.name,
        "reference": law.reference,
        **point,
        "n_points": cf.n_points,
        "n_boot": int(cf.converged.size),
        "n_boot_converged": int(cf.converged.sum()),
        "ci95": ci,
        "not_identified": list(why),
        "why_not_identified": why,
        "law_check": cf.check,
    }


def seen_key(law: Law, cols: dict, loss: np.ndarray, owner: np.ndarray, n_boot: int) -> tuple:
    """What a `fit_curves` result depends on, exactly (the seen points' bytes): equal keys give
    equal fits, so callers may reuse one (runs of a group sharing a length see the same points)."""
    parts = tuple((k, np.asarray(v).tobytes()) for k, v in sorted(cols.items()))
    return (law.name, parts, loss.tobytes(), owner.tobytes(), n_boot)


def predict_final(
    law: Law,
    group: list[Curve],
    target: Curve,
    k: float,
    n_boot=0,
    other=None,
    at=None,
    memo: dict | None = None,
):
    """The target's final loss from its group's points up to k of its tokens: (estimate,
    interval) under its own schedule, or under `other` (a runs.csv row, e.g. from
    `schedule_replay.with_schedule`); None when too few points are seen. `at`: the mean
    over these steps instead of the loss after the last one (`final_train_points`). `memo`: a
    dict of fits already made (`seen_key`), reused and filled."""
    upto = k * target.total * float(target.row["train.batch_tokens"])
    row = target.row if other is None else other
    lrs = lrs_of(row)
    warm = warmup_steps(float(row.get("train.warmup", 0.0)), lrs.size)
    cols, loss, owner = seen(law, group, upto)
    if cols is None or (anneals(features(law.name, lrs, [lrs.size], warm)) and not anneals(cols)):
        return None  # the annealing term is fitted only where some seen point annealed
    key = None if memo is None else seen_key(law, cols, loss, owner, n_boot)
    if key is not None and key in memo:
        cf = memo[key]
    else:
        cf = fit_curves(law, group, upto, n_boot)
        if key is not None:
            memo[key] = cf
    if cf is None or not np.all(np.isfinite(cf.theta)):
        return None
    return cf.predict(lrs, lrs.size if at is None else at, warm)


def anneals(cols: dict) -> bool:
    """Whether any point of a curve law's columns comes after a fall of the lr."""
    return bool(np.any(cols["S2"] > 0) if "S2" in cols else np.any(cols["drop"] != 0))


def curves_by_group(
    runs: pd.DataFrame, points: pd.DataFrame, metric: str = "val_loss"
) -> tuple[dict[str, Curve], dict[str, list[Curve]]]:
    """Every run's curve, and the curves of each group of runs that share a curve law."""
    curves = curves_of(runs, points, metric)
    label = dict(zip(runs["run_id"], groups(runs)))
    members: dict[str, list[Curve]] = {}
    for c in curves.values():
        members.setdefault(label[c.run_id], []).append(c)
    return curves, members


def prediction_errors(
    law: Law, runs: pd.DataFrame, points: pd.DataFrame, ks=KS, metric: str = "val_loss"
) -> pd.DataFrame:
    """One row per run and k: the predicted final loss from the group's `metric` points up to k
    of the run's tokens against the run's measured final loss of the same metric (nan where too
    few points are seen): the final val loss, or for train-loss curves the mean of the last
    points (`final_train_points`), against the law's mean there."""
    curves, members = curves_by_group(runs, points, metric)
    group_of = {c.run_id: group for group in members.values() for c in group}
    rows, memo = [], {}  # a group's runs of one length see the same points at each k
    for c in curves.values():
        final, at = float(c.row["loss"]), None
        if metric == "train_loss":
            at = final_train_points(c)
            final = float(c.loss[-at.size :].mean())
        for k in ks:
            got = predict_final(law, group_of[c.run_id], c, k, at=at, memo=memo)
            pred = np.nan if got is None else got[0]
            rows.append({"run_id": c.run_id, "k": k, "loss": final, "pred": pred})
    out = pd.DataFrame(rows, columns=["run_id", "k", "loss", "pred"])
    return out.assign(rel_err=out["pred"] / out["loss"] - 1.0)


def final_train_points(c: Curve) -> np.ndarray:
    """The steps a train-loss curve's final loss is measured at: its last FINAL_TRAIN_POINTS
    points (one batch's loss is noisy: ~0.05 nats at the demo's 1,024 tokens). A law fitted to
    the train loss predicts the train loss there, not the val loss: the two differ by the
    split's own offset (0.1-0.8 nats in the demo)."""
    return c.steps[-FINAL_TRAIN_POINTS:]


def error_table(errors: dict[str, pd.DataFrame]) -> str:
    """Markdown: per folder and k, runs predicted, median and max |relative error|."""
    lines = [
        "| folder | k | runs | predicted | median abs err | max abs err |",
        "|---|---|---|---|---|---|",
    ]
    for name, e in errors.items():
        for k, part in e.groupby("k"):
            err = part["rel_err"].abs().dropna()
            med = f"{100 * err.median():.2f}%" if err.size else "n/a"
            top = f"{100 * err.max():.2f}%" if err.size else "n/a"
            lines.append(f"| {name} | {k:.0%} | {len(part)} | {err.size} | {med} | {top} |")
    return "\n".join(lines)


def decayed_at(row: dict, step: int) -> dict:
    """The run's row as a run of `step` steps with its own schedule (a WSD decay over the same
    fraction, ending at `step`): what a checkpoint at `step` would have reached decayed."""
    bt = float(row["train.batch_tokens"])
    return {**row, "train.tokens": step * bt, "train.decay_start_tokens": np.nan}


def checkpoint_runs(law: Law, runs: pd.DataFrame, points: pd.DataFrame) -> pd.DataFrame:
    """Pseudo-runs from the stable-phase points of every run (D the tokens at the point, C
    scaled with D), their loss corrected by the group's curve law for the decay they did not
    have: measured + law(decayed run to there) - law(own schedule there); a point several runs
    share is one pseudo-run. Groups whose curves show no annealing, or are too few to fit, add
    none."""
    _, members = curves_by_group(runs, points)
    rows = []
    for group in members.values():
        cols, _, _ = seen(law, group)
        cf = fit_curves(law, group) if cols is not None and anneals(cols) else None
        if cf is None or not np.all(np.isfinite(cf.theta)):
            continue
        # Runs of a group whose warmup is a number of steps share their stable phase up to the
        # shorter one's decay (the longer budgets continue the same trajectory): a point they
        # share is one observation, so it is kept once, not once per run.
        kept = set()
        for c in group:
            for row in _stable_points(cf, c):
                if (key := (round(row["D"]), row["loss"])) not in kept:
                    kept.add(key)
                    rows.append(row)
    return pd.DataFrame(rows)


def _stable_points(cf: CurveFit, c: Curve) -> list[dict]:
    peak = float(c.row["train.lr"])
    stable = np.flatnonzero(np.isclose(c.lrs, peak))
    if not stable.size:
        return []
    out = []
    for step, loss in zip(c.steps, c.loss):
        if not (2 * c.warmup < step <= stable[-1]) or step == c.total:
            continue
        row = decayed_at(c.row, int(step))
        lrs = lrs_of(row)
        drop = cf.predict(lrs, lrs.size, c.warmup)[0] - cf.predict(c.lrs, int(step), c.warmup)[0]
        scale = step / c.total
        out.append(
            {
                **c.row,
                "run_id": f"{c.run_id}@{int(step)}",
                "D": float(c.row["D"]) * scale,
                "C": float(c.row["C"]) * scale,
                "loss": float(loss + drop),
            }
        )
    return out


def read_inputs(csv: str, curves_csv: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    for flag, p in (("--csv", csv), ("--curves", curves_csv)):
        if not Path(p).is_file():
            raise InputError(f"{flag}: no such file: {p}")
    runs, points = pd.read_csv(csv), pd.read_csv(curves_csv)
    check_curve_inputs(runs, points, f"--csv {csv}", f"--curves {curves_csv}")
    return runs, points


def check_curve_inputs(runs: pd.DataFrame, points: pd.DataFrame, runs_from: str, curves_from: str):
    """Curves with the columns a curve law reads, and runs whose lr can be replayed; else one
    InputError naming the source and the missing columns (otherwise every curve is silently
    left out and nothing is fitted)."""
    missing = sorted({"run_id", "tokens", "val_loss"} - set(points.columns))
    if missing:
        raise InputError(f"{curves_from}: no column(s) {missing}")
    check_points(points, curves_from)
    if "run_id" not in runs.columns:
        raise InputError(f"{runs_from}: no column 'run_id' to match the curves' runs")
    if not set(runs["run_id"].astype(str)) & set(points["run_id"].astype(str)):
        raise InputError(f"{curves_from}: no run_id in common with {runs_from}")
    if not replayable(runs):
        missing = [k for k in SCHEDULE_KEYS if k not in runs.columns]
        raise InputError(f"{runs_from}: no schedule columns {missing}: the lr cannot be replayed")


def check_points(points: pd.DataFrame, curves_from: str) -> None:
    """Every point has a run_id and a finite, non-negative `tokens`, once per run: a point
    given twice, or at no step, would be fitted as if it were another step (rows are sorted
    by step per run in `curves_of`, so their order in the file does not matter)."""
    tokens = pd.to_numeric(points["tokens"], errors="coerce")
    bad = ~np.isfinite(tokens.to_numpy(float)) | (tokens.to_numpy(float) < 0)
    if bad.any():
        rows = np.flatnonzero(bad)
        raise InputError(
            f"{curves_from}: column 'tokens' has {rows.size} missing, non-numeric, negative or "
            f"infinite value(s) (rows {', '.join(map(str, rows[:5]))}); every point needs the "
            "tokens seen at it"
        )
    if points["run_id"].isna().any() or (points["run_id"].astype(str).str.strip() == "").any():
        raise InputError(f"{curves_from}: column 'run_id' is empty in some rows")
    repeated = points.duplicated(["run_id", "tokens"], keep=False)
    if repeated.any():
        first = points[repeated].iloc[0]
        same = (points["run_id"] == first["run_id"]) & (points["tokens"] == first["tokens"])
        raise InputError(
            f"{curves_from}: run {first['run_id']} has {int(same.sum())} points at tokens "
            f"{first['tokens']:g} (rows {', '.join(map(str, np.flatnonzero(same)[:5]))}); "
            "each step once per run"
        )


def main(argv: list[str] | None = None) -> int:
    ap = ArgumentParser(prog="python -m analysis.curves", description=__doc__.split("\n")[0])
    ap.add_argument("--csv", required=True, help="runs.csv with the runs' config columns")
    ap.add_argument(
        "--curves", required=True, help="curves.csv: run_id, tokens, val_loss[, train_loss, lr]"
    )
    ap.add_argument("--law", default="tissue", choices=sorted(CURVE_LAWS))
    ap.add_argument(
        "--metric",
        default="auto",
        choices=("auto", *METRICS),
        help="the loss the laws fit (auto: val_loss unless too sparse and train_loss is there)",
    )
    ap.add_argument("--out", help="write the markdown here (default: stdout)")
    args = ap.parse_args(argv)
    try:
        if args.out:
            check_out_file(args.out)
        runs, points = read_inputs(args.csv, args.curves)
        if args.metric != "auto" and args.metric not in points.columns:
            raise InputError(f"--metric {args.metric}: no such column in {args.curves}")
    except InputError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    law = CURVE_LAWS[args.law]
    metric = choose_metric(points, args.metric)
    errors = prediction_errors(law, runs, points, metric=metric)
    text = metric_note(points, metric) + "\n\n" + error_table({Path(args.csv).parent.name: errors})
    if args.out:
        Path(args.out).write_text(text + "\n")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
