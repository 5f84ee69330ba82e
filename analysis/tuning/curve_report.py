"""The report's loss-curve section: the Tissue et al. curve law fitted to the logged curves (one
figure), its final-loss prediction errors from 25/50/75% of each run, and curve-aware tuning
against the full grid (`analysis.tuning.curves`, `analysis.tuning.curve_check`).

Shown for a swept experiment whose runs.csv holds every candidate trained to its budget (a full
grid: `tune_role` candidates at their arm's largest D), its curves, and the config columns the
lr is replayed from.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from analysis.data.load import InputError
from analysis.fits.laws.curve import TISSUE
from analysis.tuning import arms as tuning
from analysis.tuning import curve_check
from analysis.tuning import curves as C

HEADING = "Loss-curve law"
N_BOOT = 50
MAX_GROUPS = 6  # fitted groups drawn in the figure (those with the most points)


def applies(grid: pd.DataFrame | None, curves: pd.DataFrame | None) -> bool:
    """A full grid, or a sweep tuned from partial curves (`curve_tuned`), with curves and
    replayable schedules."""
    if grid is None or curves is None or curves.empty or not C.replayable(grid):
        return False
    if not {"tune_role", "arm", "D"} <= set(grid.columns):
        return False
    cand = grid[grid["tune_role"] == "candidate"]
    budget = grid.groupby("arm")["D"].transform("max")[cand.index]
    return len(cand) > 0 and (bool((cand["D"] >= budget).all()) or curve_tuned(grid))


def curve_tuned(grid: pd.DataFrame) -> bool:
    """Tuned by `sweep.tune_curve`: its candidates are prefixes tagged with their budget."""
    return bool(tuning.curve_prefixes(grid[grid["tune_role"] == "candidate"]).any())


def fitted_groups(
    runs: pd.DataFrame, points: pd.DataFrame, metric: str = "val_loss"
) -> list[tuple[str, C.CurveFit, list]]:
    """(label, fit, curves) of the groups whose curves show annealing and have enough points."""
    curves = C.curves_of(runs, points, metric)
    label = dict(zip(runs["run_id"], C.groups(runs)))
    members: dict[str, list[C.Curve]] = {}
    for c in curves.values():
        members.setdefault(label[c.run_id], []).append(c)
    ranked = sorted(members.items(), key=lambda kv: -sum(c.steps.size for c in kv[1]))
    out = []
    for name, group in ranked:
        cols, _, _ = C.seen(TISSUE, group)
        if cols is None or not C.anneals(cols):
            continue
        cf = C.fit_curves(TISSUE, group, n_boot=N_BOOT)
        if cf is not None and np.all(np.isfinite(cf.theta)):
            out.append((name, cf, group))
        if len(out) == MAX_GROUPS:
            break
    return out


def figure(fits: list, plt, metric: str = "val_loss"):
    """Measured loss (markers) and the fitted law (lines) against tokens, per group
    (`plt`: matplotlib.pyplot, which `analysis.report.plots` has imported and set up).

    Each line spans its run's measured points only (the law before the first logged step is
    not data), the y axis the measured losses, and the legend (full group names) sits below
    the axes, clear of the points."""
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    measured = []
    for i, (name, cf, group) in enumerate(fits):
        color = f"C{i}"
        for c in group:
            bt = float(c.row["train.batch_tokens"])
            steps = np.arange(1, c.total + 1)
            cols = C.features(TISSUE.name, c.lrs, steps, c.warmup)
            shown = (steps >= c.steps.min()) & (steps <= c.steps.max())
            law = TISSUE.predict(cf.theta, cols)[0]
            ax.plot(steps[shown] * bt, law[shown], color=color, lw=1)
            ax.plot(c.steps * bt, c.loss, "o", color=color, ms=4 if metric == "val_loss" else 1)
            measured.append(np.asarray(c.loss, dtype=float))
        ax.plot([], [], color=color, label=_short(name))
    ax.set_xscale("log")
    loss = np.concatenate(measured) if measured else np.array([])
    loss = loss[np.isfinite(loss)]
    if loss.size:
        pad = 0.05 * max(float(np.ptp(loss)), 1e-3)
        ax.set_ylim(loss.min() - pad, loss.max() + pad)
    ax.set_xlabel("tokens")
    ax.set_ylabel(metric.replace("_", " ") + " (nats per token)")
    ax.legend(fontsize=6, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=1, frameon=False)
    return fig


def _short(label: str) -> str:
    """variant|N|seed|lr|warmup|wd -> 'variant N=.. lr=.. seed ..' (the variant's whole name;
    the seed, so two seeds of one setting do not read the same)."""
    parts = label.split("|")
    if len(parts) <= 3:
        return label
    seed = f"{float(parts[2]):g}" if parts[2].replace(".", "", 1).isdigit() else parts[2]
    return f"{parts[0]} N={float(parts[1]):.3g} lr={parts[3]} seed {seed}"


def _fit_rows(fits: list) -> list[list[str]]:
    rows = []
    for name, cf, _ in fits:
        sec = C.section(cf)
        cells = []
        for k in TISSUE.params:
            ci = sec["ci95"].get(k)
            tail = " (not identified)" if k in sec["not_identified"] else ""
            band = f" [{ci[0]:.3g}, {ci[1]:.3g}]" if ci and not tail else ""
            cells.append(f"{sec[k]:.3g}{band}{tail}")
        rows.append([_short(name), str(cf.n_points), *cells])
    return rows


def _error_rows(errors: pd.DataFrame) -> list[list[str]]:
    rows = []
    for k, part in errors.groupby("k"):
        err = part["rel_err"].abs().dropna()
        shown = (
            [f"{100 * err.median():.2f}%", f"{100 * err.max():.2f}%"] if err.size else ["n/a"] * 2
        )
        rows.append([f"{k:.0%}", str(len(part)), str(err.size), *shown])
    return rows


def blocks(
    grid: pd.DataFrame | None, curves: pd.DataFrame | None, fig_dir: Path, keys=()
) -> list[tuple]:
    """The section's blocks (the figure saved to fig_dir), or none where it does not apply."""
    if not applies(grid, curves):
        return []
    from analysis.report import plots  # lazy: seaborn ~3 s (a report has imported it already)

    prefixes = None
    if curve_tuned(grid):  # the law on the runs that trained on; the prefixes ranked them
        prefixes = grid[grid["tune_role"] == "candidate"]
        grid = grid[grid["tune_role"] != "candidate"]
        curves = curves[curves["run_id"].isin(grid["run_id"])]
    metric = C.choose_metric(curves)
    fits = fitted_groups(grid, curves, metric)
    b: list[tuple] = [("h2", HEADING)]
    b.append(
        (
            "p",
            f"{TISSUE.reference}: L = L0 + A S1^-alpha - C S2, lr replayed per step "
            "from each run's config; one law per group of runs sharing model and "
            "hyperparameters (`python -m analysis.curves`, docs/analysis.md). "
            + C.metric_note(curves, metric),
        )
    )
    if fits:
        plots.save(figure(fits, plots.plt, metric), fig_dir, "curve_law")
        header = ["group", "points", *TISSUE.params]
        b.append(("table", header, _fit_rows(fits)))
        shown = metric.replace("_", " ").capitalize()
        b.append(("fig", "curve_law", f"{shown} (points) and the fitted curve law (lines)."))
        checks = [
            f"{_short(name)}: {cf.check['sentence']}"
            for name, cf, _ in fits
            if cf.check is not None
        ]
        if checks:
            b.append(
                (
                    "p",
                    "Each law against the points it was fitted to (each against its run's "
                    "step-to-step noise):",
                )
            )
            b.append(("list", checks))
    errors = C.prediction_errors(TISSUE, grid, curves, metric=metric)
    final = (
        f"Final train loss (the mean of each run's last {C.FINAL_TRAIN_POINTS} points, the "
        "curve the law is fitted to)"
        if metric == "train_loss"
        else "Final val loss"
    )
    b.append(
        (
            "p",
            f"{final} predicted from the group's points up to k of each run's tokens "
            "(a run is predicted only where some seen point had annealed):",
        )
    )
    header = ["k", "runs", "predicted", "median abs error", "max abs error"]
    b.append(("table", header, _error_rows(errors)))
    if prefixes is not None:
        return b + [("p", _prefix_note(prefixes))]
    return b + _tuning_blocks(grid, curves, list(keys))


def _prefix_note(prefixes: pd.DataFrame) -> str:
    """What a curve-tuned sweep's report can say of its tuning: how, and how to check it."""
    lo, hi = (int(x) for x in prefixes["D"].astype(float).agg(["min", "max"]))
    span = f"{lo:,}" if lo == hi else f"{lo:,}-{hi:,}"
    return (
        f"The tuned values were chosen from partial curves (`sweep.tune_curve`): "
        f"{len(prefixes)} candidate prefixes of {span} tokens, "
        "each ranked by its final loss as this law (without its annealing term) predicts it "
        "from the prefix's train loss. These runs cannot show what the full grid would have "
        "chosen: `python -m analysis.tuning_check --tuned runs.csv --grid FULL_GRID/runs.csv` "
        "compares the choices with a full grid of the same arms."
    )


def _tuning_blocks(grid: pd.DataFrame, curves: pd.DataFrame, keys: list[str]) -> list[tuple]:
    """Curve-aware tuning at two runs per arm against the grid (`analysis.tuning.curve_check`)."""
    try:
        table = curve_check.check(grid, curves, keys or ["train.lr"])
    except InputError as err:
        return [
            (
                "p",
                f"Curve-aware tuning is not checked on these curves: {err}. "
                "`python -m analysis.tuning_check --strategy curve` checks it on a full grid "
                "logged with a train loss per step (docs/results.md).",
            )
        ]
    text = curve_check.markdown(table, curve_check.curve_tuning.RUNS).split("\n")
    rows = [
        [r.variant, f"{r.N:.3g}", r.points, r.choice, r.grid_choice, f"{r.rank}/{r.n_grid}"]
        + [f"{r.regret:.3f}", f"{r.margin:.3f}"]
        for r in table.itertuples()
    ]
    header = ["variant", "N", "points", "curve chose", "grid chose", "rank", "regret", "margin"]
    return [("p", " ".join(t for t in text[2:4] if t)), ("table", header, rows)]
