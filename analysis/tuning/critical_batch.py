"""Critical batch size at a fixed token budget, and its power law in D.

At a fixed number of tokens a larger batch means fewer optimizer steps; up to some batch the
loss barely changes, beyond it the loss rises. Per cell (one size and token budget, the lr
re-tuned at every batch: the loss of a batch is its best over the lr grid, as Power Lines,
arXiv 2505.13738, compares batches) the critical batch B_crit is the largest batch, going up
from the best one, whose loss stays within `tolerance` of the best; between the last batch
within it and the first beyond it, B_crit is where the loss, linear in log B, crosses
best x (1 + tolerance).

TOLERANCE = 1%: twice the near-optimal band (`hparam_surface.TOLERANCE`), so B_crit marks
where a batch starts to cost loss rather than where the optimum's plateau ends, and equal to
`identification.NOISE_CAP` (a run's seed-to-seed spread is well under 1% in published
sweeps), so a batch is said to cost loss only beyond what one seed's noise can produce.
A cell whose largest batch is still within the tolerance gives only a lower bound; a cell
with fewer than 3 batches has no profile. The law B_crit = scale x D^exponent is fitted as the
lr rule is (least squares in log-log, bootstrap over cells, `identification.lr_rule`).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.fits import identification
from analysis.fits.bootstrap import intervals, resample_counts
from analysis.tuning.arms import fit_rule

TOLERANCE = 0.01


def cell_critical(cell: dict, tolerance: float = TOLERANCE) -> dict:
    """B_crit of one cell from its (lr, batch, loss) points, or why it has none."""
    if "batch" not in cell["point_columns"]:
        return {"status": "untuned", "why": "the batch size was not tuned"}
    points = pd.DataFrame(cell["points"], columns=cell["point_columns"])
    profile = points.groupby("batch")["loss"].min()  # the lr re-tuned at every batch
    batches = sorted(profile.index)
    if len(batches) < 3:
        return {"status": "untuned", "why": f"{len(batches)} batch size(s): a profile needs 3+"}
    losses = profile.loc[batches].to_numpy()
    i = int(np.argmin(losses))
    threshold = losses[i] * (1 + tolerance)
    j = i
    while j + 1 < len(batches) and losses[j + 1] <= threshold:
        j += 1
    entry = {
        "tolerance": tolerance,
        "best_batch": float(batches[i]),
        "profile": [[float(b), float(v)] for b, v in zip(batches, losses)],
    }
    if j == len(batches) - 1:
        why = (
            f"the largest batch tried ({batches[-1]:.4g}) is still within {100 * tolerance:g}% "
            "of the best loss: B_crit lies above the grid (a lower bound only)"
        )
        return {**entry, "status": "edge", "why": why, "B_crit": float(batches[-1])}
    lo, hi = np.log(batches[j]), np.log(batches[j + 1])
    t = (threshold - losses[j]) / (losses[j + 1] - losses[j])
    return {**entry, "status": "identified", "B_crit": float(np.exp(lo + t * (hi - lo)))}


def section(cells: list[dict], n_boot: int, seed: int, tolerance: float = TOLERANCE) -> dict:
    """Every cell's B_crit and the law B_crit = scale x D^exponent over the identified ones."""
    per_cell, points, left_out = [], [], {}
    for c in cells:
        crit = cell_critical(c, tolerance)
        per_cell.append({"arm": c["arm"], "N": c["N"], "D": c["D"], **crit})
        if crit["status"] == "identified":
            points.append({"arm": c["arm"], "N": c["N"], "D": c["D"], "y": crit["B_crit"]})
        else:
            left_out[c["arm"]] = crit["why"]
    return {
        "tolerance": tolerance,
        "cells": per_cell,
        "law": {**power_law(points, "D", n_boot, seed), "left_out": left_out},
    }


def power_law(points: list[dict], variable: str, n_boot: int, seed: int) -> dict:
    """y = scale x variable^exponent over the points ({variable: x, 'y': y}), least squares in
    log-log with a bootstrap over points, and what it does not identify."""
    x = np.array([p[variable] for p in points], dtype=float)
    y = np.array([p["y"] for p in points], dtype=float)
    scale, exponent, ci = np.nan, np.nan, {"scale": None, "exponent": None}
    if len(points):
        s, e = fit_rule(x, y, np.ones((1, len(points))))
        scale, exponent = float(s[0]), float(e[0])
        reps = fit_rule(x, y, resample_counts(len(points), n_boot, seed))
        ci = intervals({"scale": reps[0], "exponent": reps[1]})
    law = {
        "variable": variable,
        "scale": scale,
        "exponent": exponent,
        "ci95": ci,
        "n_arms": len(points),  # `identification.lr_rule` words its reasons with it
        "n_cells": len(points),
        "n_boot": int(n_boot),
        "seed": int(seed),
        "points": points,
    }
    reasons = identification.lr_rule(law, n_sizes=int(np.unique(x).size))
    return identification.with_reasons(law, reasons)
