"""Matched cells: where a variant and the baseline trained the same (size, token budget), the
difference of their final losses, the most direct evidence an ablation has.

A cell is a nominal size (`model.size` where runs.csv has it, else the k-th smallest N of each
variant at that budget: the architectures' exact N differ by a few percent) and a token budget
(D within 10%). Each arm's loss is the mean over its seeds; the difference (variant - baseline,
nats) carries the runs' noise: se = sigma sqrt(1/S_v + 1/S_b), sigma the noise scale of
`analysis.verdicts.noise` (the seed spread where the sweep has seeds). Each cell's two-sided normal p of
"no difference" is Holm-adjusted over every variant x cell; a cell is "higher" / "lower" (the
variant's loss) when its adjusted p is below the family level, else "cannot tell".
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.fits.isoflop import budget_groups

FAMILY_LEVEL = 0.05


def holm_adjust(p: np.ndarray) -> np.ndarray:
    """Holm's step-down adjusted p-values (nan stays nan and is not counted in the family)."""
    p = np.asarray(p, dtype=float)
    out = np.full(p.shape, np.nan)
    ok = np.flatnonzero(np.isfinite(p))
    order = ok[np.argsort(p[ok], kind="stable")]
    m = order.size
    adjusted = np.maximum.accumulate((m - np.arange(m)) * p[order])
    out[order] = np.minimum(adjusted, 1.0)
    return out


def _keyed(runs: pd.DataFrame) -> pd.DataFrame:
    """runs with `budget` (token-budget group) and `size` (nominal size or rank) columns."""
    runs = runs.assign(budget=budget_groups(runs["D"]))
    if "model.size" in runs.columns and runs["model.size"].notna().all():
        return runs.assign(size=runs["model.size"].astype(float))
    rank = runs.groupby(["variant", "budget"])["N"].rank(method="dense")
    return runs.assign(size=rank)


def cells(runs: pd.DataFrame, baseline: str, sigma: float) -> pd.DataFrame:
    """One row per variant x matched cell: variant, size, N, N_base, D, loss, loss_base,
    seeds, seeds_base, diff, lo, hi, p, p_holm, verdict ('higher' | 'lower' | 'cannot tell')."""
    from scipy.stats import norm  # lazy: scipy ~0.9 s; a --help needs none

    k = _keyed(runs)
    g = k.groupby(["variant", "budget", "size"], sort=True).agg(
        N=("N", "mean"), D=("D", "mean"), loss=("loss", "mean"), seeds=("loss", "size")
    )
    base = g.loc[baseline] if baseline in g.index.get_level_values(0) else None
    rows = []
    for (v, budget, size), c in g.iterrows():
        if v == baseline or base is None or (budget, size) not in base.index:
            continue
        b = base.loc[(budget, size)]
        se = sigma * np.sqrt(1 / c["seeds"] + 1 / b["seeds"])
        diff = c["loss"] - b["loss"]
        rows.append(
            {
                "variant": v,
                "size": float(size),
                "N": float(c["N"]),
                "N_base": float(b["N"]),
                "D": float(c["D"]),
                "loss": float(c["loss"]),
                "loss_base": float(b["loss"]),
                "seeds": int(c["seeds"]),
                "seeds_base": int(b["seeds"]),
                "diff": float(diff),
                "lo": float(diff - 1.96 * se),
                "hi": float(diff + 1.96 * se),
                "p": float(2 * norm.sf(abs(diff) / se)),
            }
        )
    out = pd.DataFrame(rows)
    if out.empty:
        return out
    out["p_holm"] = holm_adjust(out["p"].to_numpy())
    decided = out["p_holm"] < FAMILY_LEVEL
    out["verdict"] = np.where(
        decided, np.where(out["diff"] > 0, "higher", "lower"), "cannot tell"
    ).astype(str)
    return out


def section(runs: pd.DataFrame, baseline: str, noise: dict) -> dict:
    """fit.json's `ablation.matched`: the cells and a count per variant."""
    table = cells(runs, baseline, noise["sigma"])
    per_variant = {}
    for v, g in table.groupby("variant", sort=True) if len(table) else []:
        per_variant[v] = {
            verdict: int((g["verdict"] == verdict).sum())
            for verdict in ("higher", "lower", "cannot tell")
        } | {"n_cells": int(len(g))}
    return {
        "noise": noise,
        "family_level": FAMILY_LEVEL,
        "n_cells": int(len(table)),
        "cells": table.to_dict(orient="records"),
        "variants": per_variant,
    }


def _span(diffs) -> str:
    lo, hi = float(np.min(diffs)), float(np.max(diffs))
    return f"{lo:.2f}" if f"{lo:.2f}" == f"{hi:.2f}" else f"{lo:.2f}-{hi:.2f}"


def sentence(variant: str, baseline: str, matched: dict) -> str | None:
    """The report's first sentence for a variant: what its matched cells show, or None."""
    cells_v = [c for c in matched["cells"] if c["variant"] == variant]
    if not cells_v:
        return None
    k = len(cells_v)
    sigma = matched["noise"]["sigma"]
    parts = []
    for verdict, word in (("higher", "higher"), ("lower", "lower")):
        hit = [abs(c["diff"]) for c in cells_v if c["verdict"] == verdict]
        if hit:
            parts.append(
                f"at {len(hit)} of {k} matched cells {variant}'s loss is {word} than "
                f"{baseline}'s by {_span(hit)} nats"
            )
    undecided = [c for c in cells_v if c["verdict"] == "cannot tell"]
    if undecided:
        parts.append(f"at {len(undecided)} of {k} the difference is within noise")
    return (
        "; ".join(parts)[0].upper()
        + "; ".join(parts)[1:]
        + f" (seed spread {sigma:.3f} nats; Holm over {matched['n_cells']} cells at "
        f"{matched['family_level']:g})."
    )
