"""The runs' noise scale and the unigram plateau: what a law and a verdict are judged against.

Noise scale sigma (nats, one run's final loss): where a sweep trained some (variant, N, D) cells
with more than one seed, a median over those cells of their seed-to-seed variance (`pooled_sd`:
a median, so one unstable cell, e.g. an lr at the edge of stability, does not widen every
interval; each cell's variance scaled so that its median estimates sigma^2); with fewer than
MIN_SEEDED_CELLS such cells, DEFAULT_NOISE, the project's own measurement, stated as such.

DEFAULT_NOISE: that estimate over the demo's 60 (block, size, lr, warmup) configurations trained
with three seeds (results/demo/curve_grid, curve_grid_seed1, curve_grid_seed2): 0.059 nats;
`python -m analysis.noise results/demo/curve_grid/runs.csv results/demo/curve_grid_seed1/runs.csv
results/demo/curve_grid_seed2/runs.csv` prints it.

The plateau: a model that has learned only the tokens' frequencies reaches the corpus's unigram
entropy H (nats per token, recorded with the token cache and carried in runs.csv as
`unigram_entropy`). A run whose loss is above H - PLATEAU_Z sigma has not left that plateau
within noise: its loss measures when the escape happens, not the block, so it is left out of
every law (it stays in the matched-cell table, flagged).
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
import pandas as pd

DEFAULT_NOISE = 0.059  # nats; see the module docstring for the measurement
MIN_SEEDED_CELLS = 3  # fewer seeded cells than this: the default noise scale
PLATEAU_Z = 2.0  # a run within 2 sigma of the unigram entropy (or above it) is on the plateau
CELL = ["variant", "N", "D"]


def pooled_sd(groups) -> tuple[float, int]:
    """(sigma, cells) from grouped losses: the median over cells with 2+ seeds of each cell's
    variance scaled to estimate sigma^2 at its median (s^2 (n-1) / the chi-square median with
    n-1 degrees of freedom: at 2 seeds a plain median of sds is 0.67 sigma); nan with none."""
    stats = groups.agg(["count", "var"])
    stats = stats[(stats["count"] > 1) & np.isfinite(stats["var"])]
    if stats.empty:
        return float("nan"), 0
    from scipy.stats import chi2  # lazy: scipy ~0.9 s; a --help needs none

    dof = stats["count"].to_numpy(dtype=float) - 1
    scaled = stats["var"].to_numpy(dtype=float) * dof / chi2.median(dof)
    return float(np.sqrt(np.median(scaled))), int(len(stats))


def noise_scale(runs: pd.DataFrame) -> dict:
    """{"sigma", "source" ("seeds" | "default"), "n_cells" (seeded cells used)} of the runs."""
    key = [k for k in CELL if k in runs.columns]
    sigma, n = pooled_sd(runs.groupby(key, sort=True)["loss"])
    if n < MIN_SEEDED_CELLS:
        return {"sigma": DEFAULT_NOISE, "source": "default", "n_cells": n}
    return {"sigma": sigma, "source": "seeds", "n_cells": n}


def describe(noise: dict) -> str:
    """One phrase: the noise scale and where it comes from."""
    if noise["source"] == "seeds":
        return (
            f"seed spread {noise['sigma']:.3f} nats (measured over {noise['n_cells']} cells "
            "trained with several seeds)"
        )
    return (
        f"seed spread {noise['sigma']:.3f} nats (not measured by these runs: the project's "
        "default, measured on the demo's 60 configurations at 3 seeds)"
    )


def unigram_entropy(runs: pd.DataFrame) -> float | None:
    """The corpus's unigram entropy (nats/token) the runs recorded, or None. Runs of different
    corpora or vocabularies differ; the largest is the (most lenient) plateau level."""
    if "unigram_entropy" not in runs.columns:
        return None
    h = pd.to_numeric(runs["unigram_entropy"], errors="coerce").dropna()
    return float(h.max()) if len(h) else None


def on_plateau(runs: pd.DataFrame, sigma: float) -> pd.Series:
    """Boolean per run: its loss has not left the unigram plateau within noise (False for every
    run when the entropy is not recorded). A run's own recorded entropy is used where present."""
    if "unigram_entropy" not in runs.columns:
        return pd.Series(False, index=runs.index)
    h = pd.to_numeric(runs["unigram_entropy"], errors="coerce")
    return (runs["loss"] > h - PLATEAU_Z * sigma).fillna(False).astype(bool)


def plateau_section(runs: pd.DataFrame, sigma: float) -> dict:
    """fit.json's `plateau`: the entropy, the threshold and the runs on the plateau."""
    h = unigram_entropy(runs)
    flat = on_plateau(runs, sigma)
    cols = [c for c in ("run_id", "variant", "N", "D", "loss") if c in runs.columns]
    listed = runs.loc[flat, cols].sort_values([c for c in ("variant", "N", "D") if c in cols])
    return {
        "unigram_entropy": h,
        "threshold": None if h is None else h - PLATEAU_Z * sigma,
        "n_runs": int(flat.sum()),
        "runs": listed.to_dict(orient="records"),
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m analysis.noise",
        description="The noise scale of runs.csv files taken together: the median seed-to-seed "
        "standard deviation of the final loss over cells with several seeds (cells matched by "
        "variant, size, budget and every tuned value).",
    )
    p.add_argument("csv", nargs="+", help="runs.csv files (e.g. one sweep per seed)")
    args = p.parse_args(argv)
    frames = []
    for path in args.csv:
        try:
            frames.append(pd.read_csv(path))
        except (OSError, pd.errors.ParserError) as e:
            print(f"error: cannot read {path}: {e}", file=sys.stderr)
            return 2
    runs = pd.concat(frames, ignore_index=True)
    missing = [c for c in ("variant", "N", "D", "loss") if c not in runs.columns]
    if missing:
        print(f"error: runs.csv has no column {missing[0]!r}", file=sys.stderr)
        return 2
    key = ["variant", "D"] + [c for c in runs.columns if c in ("model.size",)]
    key += [c for c in runs.columns if c in ("train.lr", "train.warmup", "train.batch_tokens")]
    key = key if "model.size" in key else key + ["N"]
    sigma, n = pooled_sd(runs.groupby(key, sort=True)["loss"])
    if n == 0:
        print("error: no configuration was trained with more than one seed", file=sys.stderr)
        return 2
    print(f"{n} configurations with 2+ seeds: seed spread sigma {sigma:.4f} nats")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
