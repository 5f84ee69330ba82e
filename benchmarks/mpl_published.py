"""Luo et al. 2025's published multi-power-law fits, reproduced from the authors' own curves.

    python -m benchmarks.mpl_published --repo DIR [--size 25] [--definition code|paper] [--fit]

DIR is a checkout of github.com/thu-yao-01-luo/MultiPowerLaw (MIT License; `COMMIT` read
here), which holds the loss curves they fitted (loss_curve_repo/csv_<size>/<schedule>.csv:
step, lr, loss of 25M/100M/400M models), the parameters they fitted (src/config.py = the
README's "Best Parameters"), the metrics their code logged at them (logs/<size>.log) and the
README's table of those metrics averaged over the held-out curves. The command prints the
README's metrics beside ours at the published parameters, and with --fit our engine's fit
(`analysis.fits.laws.base.fit`) of the same curves, started at the published parameters.

How their code (src/data_loader.py, src/evaluation.py, src/models.py) reads a curve, and so
how it maps onto `analysis.fits.laws.curve.features`:
- the lr of every step is rebuilt from the schedule's name (`lrs`), the warmup included: a
  linear rise from 0 to the peak over 2,160 steps, then the schedule; the csv's lr column is
  that lr at the logged step;
- the loss logged at step s is compared with S1 = the sum of the lr of steps 0..s (s + 1
  terms) and S_k = the sum from k to s: `features(..., steps=s + 1)` here;
- every lr change from step 1 on enters the annealing sum LD, the warmup's rises included
  (as negative drops): `--definition code`, `features(..., warmup=0)`. The paper's equation
  (and `analysis.tuning.curves`, which passes the run's warmup) leaves the warmup out of LD
  (`--definition paper`); at the published 25M parameters the rises' term adds 0.100-0.109
  nats to every prediction, nearly a constant, so L0 differs by about that much between the two;
- the objective is the sum over the training curves of Huber(delta 1e-3) of log(loss) -
  log(prediction), the engine's. Their fit (src/fitting.py) is AdamW from an L-BFGS-B fit of a
  simpler form, stopped after 20 steps without improvement: not the objective's minimum.

Exit code 2 with one line on stderr when DIR is not such a checkout.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

from analysis.data.load import InputError
from analysis.data.select import ArgumentParser
from analysis.fits.laws.base import Fit, fit, one_thread
from analysis.fits.laws.curve import CURVE_LAWS, features
from analysis.tuning.curves import stack

LAW = CURVE_LAWS["multipower"]
COMMIT = "8da9f1902602f3391b971a811e3cc51604541769"
WARMUP, PEAK, END = 2160, 3e-4, 3e-5  # src/data_loader.py: every run's warmup and lrs
TRAIN = ("cosine_24000", "constant_24000", "wsdcon_9")  # src/config.py TRAIN_SET
TEST = (
    "constant_72000",
    "cosine_72000",
    "wsd_20000_24000",
    "wsdld_20000_24000",
    "wsdcon_3",
    "wsdcon_18",
)

# src/config.py PARAMS, in LAW.params order (L0, A, alpha, B, C, beta, gamma); the README rounds
CONFIG_PARAMS = {
    "25": [3.04045406, 0.52468604, 0.50786857, 363.78751622, 2.06560812, 0.58279013, 0.64142257],
    "100": [2.6514477, 0.60115152, 0.45295811, 437.9464276, 2.13245612, 0.59785199, 0.65523644],
    "400": [2.37474466, 0.65421216, 0.42878731, 523.42464371, 2.02462735, 0.59350493, 0.63472457],
}
PARAMS = {size: dict(zip(LAW.params, values)) for size, values in CONFIG_PARAMS.items()}

# README "Evaluation Metrics": each the mean over the TEST curves, as printed (3-4 digits)
README = {
    "25": dict(r2=0.9988, mae=0.00376, rmse=0.00465, prede=0.00110, worste=0.00409),
    "100": dict(r2=0.9983, mae=0.00435, rmse=0.00592, prede=0.00142, worste=0.00583),
    "400": dict(r2=0.9978, mae=0.00484, rmse=0.00730, prede=0.00168, worste=0.00995),
}


def lrs(name: str) -> np.ndarray:
    """The lr of every step of a schedule named as the authors' files are: cosine_<total>,
    constant_<total>, wsdcon_<n> (3e-4, then n * 1e-5 from step 8,000 to 16,000),
    wsd_20000_24000 (exponential decay to 3e-5 from step 20,000), wsdld_20000_24000 (linear)."""
    kind, *rest = name.split("_")
    warm = np.linspace(0.0, PEAK, WARMUP)
    if kind in ("cosine", "constant"):
        s = np.arange(WARMUP, int(rest[0]))
        cos = END + 0.5 * (PEAK - END) * (1 + np.cos(np.pi * (s - WARMUP) / (s.size)))
        return np.concatenate([warm, cos if kind == "cosine" else np.full(s.size, PEAK)])
    if kind == "wsdcon":
        return np.concatenate(
            [warm, np.full(8000 - WARMUP, PEAK), np.full(8000, int(rest[0]) * 1e-5)]
        )
    start, total = 20_000, 24_000
    f = np.arange(total - start) / (total - start)
    tail = PEAK ** (1 - f) * END**f if kind == "wsd" else PEAK * (1 - f) + END * f
    return np.concatenate([warm, np.full(start - WARMUP, PEAK), tail])


def curve(name: str, folder: Path) -> tuple[np.ndarray, pd.DataFrame]:
    """(lr of every step, the csv's step/lr/loss rows inside the schedule)."""
    rates = lrs(name)
    rows = pd.read_csv(Path(folder) / f"{name}.csv", comment="#")
    return rates, rows[rows["step"] < rates.size].reset_index(drop=True)


def columns(names, folder: Path, warmup: int = 0) -> tuple[dict, np.ndarray]:
    """The law's columns and the loss of the named curves' points, stacked. warmup = 0: the
    authors' code (the warmup's rises in LD); WARMUP: the paper's equation."""
    parts, loss = [], []
    for name in names:
        rates, rows = curve(name, folder)
        parts.append(features(LAW.name, rates, rows["step"].to_numpy() + 1, warmup))
        loss.append(rows["loss"].to_numpy(float))
    return stack(LAW, parts), np.concatenate(loss)


def metrics(values: dict, name: str, folder: Path, warmup: int = 0) -> dict:
    """The authors' metrics (src/evaluation.py) of the law at `values` on one curve; the
    Huber sum is the engine's objective. Points in blocks of 64: a point's columns are as
    wide as the lr falls before it (70,000 on a 72,000-step cosine)."""
    rates, rows = curve(name, folder)
    steps, loss = rows["step"].to_numpy() + 1, rows["loss"].to_numpy(float)
    theta = LAW.to_theta(values)
    pred, huber = [], 0.0
    for i in range(0, steps.size, 64):
        cols = features(LAW.name, rates, steps[i : i + 64], warmup)
        pred.append(LAW.predict(theta, cols)[0])
        huber += float(
            LAW.objective(cols, loss[i : i + 64])(theta[None, :], np.zeros(1, int))[0][0]
        )
    pred = np.concatenate(pred)
    err = np.abs(loss - pred)
    return {
        "huber": huber,
        "mae": float(err.mean()),
        "rmse": float(np.sqrt(np.mean(err**2))),
        "prede": float(np.mean(err / loss)),
        "worste": float(np.max(err / loss)),
        "r2": float(1 - np.sum(err**2) / np.sum((loss - loss.mean()) ** 2)),
        "pred": pred,
        "loss": loss,
    }


DEFINITIONS = {"code": 0, "paper": WARMUP}  # the warmup `features` leaves out of LD
METRIC_NAMES = ("r2", "mae", "rmse", "prede", "worste")


def folder_of(repo: str | Path, size: str) -> Path:
    """loss_curve_repo/csv_<size> of a checkout, checked to hold every curve."""
    folder = Path(repo) / "loss_curve_repo" / f"csv_{size}"
    missing = [n for n in TRAIN + TEST if not (folder / f"{n}.csv").is_file()]
    if missing:
        raise InputError(f"--repo {repo}: no {folder}/{missing[0]}.csv (a MultiPowerLaw checkout?)")
    return folder


def mean_metrics(values: dict, names, folder: Path, warmup: int) -> dict:
    """The README's row: each metric's mean over the curves; and the summed Huber objective."""
    per_curve = [metrics(values, name, folder, warmup) for name in names]
    row = {k: float(np.mean([m[k] for m in per_curve])) for k in METRIC_NAMES}
    return {**row, "huber": float(sum(m["huber"] for m in per_curve))}


def start_for(size: str, folder: Path, warmup: int) -> dict:
    """The published parameters; under the paper's definition L0 raised by the warmup rises'
    mean term on the training points (what their code adds to every prediction)."""
    values = dict(PARAMS[size])
    if warmup:
        code, paper = columns(TRAIN, folder, 0), columns(TRAIN, folder, warmup)
        theta = LAW.to_theta(values)
        values["L0"] += float(np.mean(LAW.predict(theta, code[0]) - LAW.predict(theta, paper[0])))
    return values


def refit(folder: Path, start: dict, warmup: int = 0) -> Fit:
    """Our engine's fit of the law to the training curves (every point, as the authors fit),
    from `start`. Each evaluation spans every point x every lr fall before it (437 x 23,919
    on the 25M curves): 9-18 minutes on a shared 2-core machine."""
    cols, loss = columns(TRAIN, folder, warmup)
    with one_thread():
        return fit(LAW, cols, loss, LAW.to_theta(start)[None, :])


def report(folder: Path, size: str, definition: str, fitted: Fit | None) -> str:
    """Markdown: the README's row, ours at the published parameters (their code's definition),
    and our fit's, each with its parameters."""
    rows = [("README (published)", None, 0), ("ours at the published parameters", PARAMS[size], 0)]
    if fitted is not None:
        values = {k: float(v[0]) for k, v in LAW.to_values(fitted.theta).items()}
        rows.append((f"our fit ({definition} definition)", values, DEFINITIONS[definition]))
    head = ["R^2", "MAE", "RMSE", "PredE", "WorstE", "train Huber sum", *LAW.params]
    lines = [
        f"{size}M: metrics on {', '.join(TEST)}; fitted to {', '.join(TRAIN)}",
        "",
        "| | " + " | ".join(head) + " |",
        "|---" * (len(head) + 1) + "|",
    ]
    for label, values, warmup in rows:
        if values is None:
            row, huber, values = README[size], "", PARAMS[size]
        else:
            row = mean_metrics(values, TEST, folder, warmup)
            huber = f"{mean_metrics(values, TRAIN, folder, warmup)['huber']:.4g}"
        cells = [f"{row[k]:.5f}" for k in METRIC_NAMES] + [huber]
        lines.append(
            f"| {label} | " + " | ".join(cells + [f"{values[k]:.4g}" for k in LAW.params]) + " |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = ArgumentParser(
        prog="python -m benchmarks.mpl_published", description=__doc__.split("\n")[0]
    )
    ap.add_argument("--repo", required=True, help="a checkout of thu-yao-01-luo/MultiPowerLaw")
    ap.add_argument("--size", default="25", choices=sorted(PARAMS))
    ap.add_argument("--definition", default="code", choices=sorted(DEFINITIONS))
    ap.add_argument("--fit", action="store_true", help="also fit the training curves (minutes)")
    args = ap.parse_args(argv)
    try:
        folder = folder_of(args.repo, args.size)
    except InputError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    warmup = DEFINITIONS[args.definition]
    fitted = refit(folder, start_for(args.size, folder, warmup), warmup) if args.fit else None
    print(report(folder, args.size, args.definition, fitted))
    if fitted is not None:
        print(f"\nour fit's objective {fitted.objective:.6g} (train Huber sum)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
