"""Tuned sweeps: the run of each arm at its best hyperparameters, and the lr scaling rule.

An arm is one variant x size x token budget (the `arm` column, tagged by the sweep, where the
runs have it; else variant x N x D). Its runs differ only in the tuned keys (`--tune train.lr`)
and the seed. Per arm:

- full-length runs (D within FULL_RTOL of the arm's largest D, or less than one batch short of
  it where the batch size is a column: a run trains whole steps) are the grid's results: the
  loss of a value is the mean final loss of its runs over the seeds every value has (a sweep
  with `sweep.seeds` trains its candidates at seed 0 and the chosen value at more: those are
  its result, not more candidates), the best value the lowest, and the runs at the best value
  are the arm's result (one per seed); every law is then fitted to those runs only;
- runs stopped early (successive halving's losers: fewer tokens than the arm's budget) are
  never an arm's result; they are listed under `stopped_early` with their loss at their own
  tokens, count in the grid (so a halving that kept the edge value is flagged), and are drawn
  hollow in the figure;
- `at_edge`: the best value is the lowest or highest of its key's grid (2+ values): the optimum
  may lie outside, widen the grid there.

The lr rule (DeepSeek LLM 2024 fit eta_opt as a power law of compute; OLMo's ladder uses
lr ~ N^-1/3): lr_opt = scale * x^exponent over arms, x = N (and C = 6 N D), least squares in
log-log, 95% bootstrap intervals over arms. Each arm's lr_opt is the vertex of the parabola in
log lr through its best grid value and both neighbours (the grid value itself without a convex
neighbourhood); arms at the edge of their lr grid give only a bound and are left out.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from analysis.data.load import InputError
from analysis.fits import identification
from analysis.fits.bootstrap import intervals, resample_counts

FULL_RTOL = 0.01  # a run within 1% of its arm's largest D trained the arm's budget
BATCH_COLUMN = "train.batch_tokens"
PREFIX_TAG = "tune_budget"  # curve-aware tuning's prefixes carry their arm's budget (a tag)


def full_length(g: pd.DataFrame, budget: float) -> pd.Series:
    """Which runs trained the arm's budget: D within FULL_RTOL of it, or less than one batch
    short (a larger batch trains fewer whole steps of the same token budget)."""
    full = g["D"] >= budget / (1 + FULL_RTOL)
    if BATCH_COLUMN in g.columns:
        full |= g["D"] > budget - pd.to_numeric(g[BATCH_COLUMN], errors="coerce").fillna(0)
    return full


def value_text(value) -> str:
    """A tuned value as fit.json's `losses` keys and the report print it ('0.002', 'swiglu')."""
    if isinstance(value, float | np.floating):
        return f"{float(value):.6g}"
    return str(value)


def combo_text(keys: list[str], values: tuple) -> str:
    """One point of the grid: the value alone for one key, 'k1=v1, k2=v2' for several."""
    if len(keys) == 1:
        return value_text(values[0])
    return ", ".join(f"{k}={value_text(v)}" for k, v in zip(keys, values))


def check_keys(runs: pd.DataFrame, keys: list[str]) -> None:
    """Every --tune key once, a column of the runs, with a value in every run."""
    for key in keys:
        if keys.count(key) > 1:
            raise InputError(f"--tune {key} is given more than once")
        if key not in runs.columns:
            tuned = sorted(c for c in map(str, runs.columns) if c.startswith(("train.", "model.")))
            raise InputError(f"--tune {key}: no column '{key}' in the runs; columns: {tuned}")
        missing = runs[key].isna()
        if missing.any():
            raise InputError(f"--tune {key}: {int(missing.sum())} run(s) have no value of '{key}'")


def arm_labels(runs: pd.DataFrame, variant: str = "variant") -> pd.Series:
    """Each run's arm: its `arm` column where every run has one, else variant x N x D."""
    if "arm" in runs.columns and runs["arm"].notna().all():
        return runs["arm"].astype(str)
    names = runs[variant].astype(str) if variant in runs.columns else pd.Series("base", runs.index)
    return names + runs["N"].map(lambda n: f" N={n:.6g}") + runs["D"].map(lambda d: f" D={d:.6g}")


def arm_name(arm: dict) -> str:
    """An arm as the report names it: 'llama N 1.02e+05 D 2.51e+05' (its id is a hash)."""
    return f"{arm['variant']} N {arm['N']:.3g} D {arm['D']:.3g}"


def _numeric(values) -> bool:
    return all(isinstance(v, int | float | np.number) and math.isfinite(float(v)) for v in values)


def _vertex(xs: list[float], losses: list[float], best: float) -> float:
    """Minimum of the parabola in log x through the best value and its grid neighbours; the best
    value itself at an edge, with non-positive values, or without a convex neighbourhood."""
    i = xs.index(best)
    if not 0 < i < len(xs) - 1 or min(xs) <= 0:
        return float(best)
    x = np.log(xs[i - 1 : i + 2])
    c2, c1, _ = np.polyfit(x, losses[i - 1 : i + 2], 2)
    if not c2 > 0:
        return float(best)
    return float(np.exp(np.clip(-c1 / (2 * c2), x[0], x[2])))


def curve_prefixes(runs: pd.DataFrame) -> pd.Series:
    """Which runs are prefixes of curve-aware tuning (`sweep.tune_curve`: tagged with their
    arm's budget), not halving's segments or full-length runs."""
    if PREFIX_TAG not in runs.columns:
        return pd.Series(False, index=runs.index)
    return runs[PREFIX_TAG].notna()


def _compared(full: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """The full-length runs a value's loss is measured on: those at the seeds every value was
    trained with (all of them without a seed column, or where no seed is common)."""
    if "seed" not in full.columns or full["seed"].isna().any():
        return full
    seeds = [set(g["seed"]) for _, g in full.groupby(keys, sort=False)]
    common = set.intersection(*seeds) if seeds else set()
    return full[full["seed"].isin(common)] if common else full


def _arm_entry(arm: str, g: pd.DataFrame, keys: list[str], variant: str) -> tuple[dict, list]:
    """The tuning section's entry of one arm, and the run ids of its result."""
    budget = float(g["D"].max())
    full = g[full_length(g, budget)]
    stopped = g.drop(full.index)
    prefix = curve_prefixes(stopped)
    combos = _compared(full, keys).groupby(keys, sort=True)["loss"].mean()  # over seeds
    combos.index = [c if isinstance(c, tuple) else (c,) for c in combos.index]
    best = combos.idxmin()
    chosen = full[np.logical_and.reduce([full[k] == v for k, v in zip(keys, best)])]
    entry = {
        "arm": arm,
        "variant": str(g[variant].iloc[0]) if variant in g.columns else "base",
        "N": float(g["N"].iloc[0]),
        "D": budget,
        "best": {k: v for k, v in zip(keys, best)},
        "losses": {combo_text(keys, c): float(v) for c, v in combos.items()},
        "grid": {},
        "at_edge": False,
        "edge": {},
        "optimum": {},
        "n_runs": int(len(g)),
        "selected": sorted(map(str, chosen["run_id"])),
        "stopped_early": [
            {
                "value": combo_text(keys, tuple(r[k] for k in keys)),
                "D": float(r["D"]),
                "loss": float(r["loss"]),
                # a prefix of curve-aware tuning (ranked by a curve law), not a halving loser
                "curve": bool(prefix[i]),
            }
            for i, r in stopped.sort_values([*keys, "D"]).iterrows()
        ],
    }
    for j, key in enumerate(keys):
        grid = sorted(set(g[key]))
        entry["grid"][key] = grid
        if len(grid) >= 2 and _numeric(grid) and best[j] in (grid[0], grid[-1]):
            entry["edge"][key] = "lowest" if best[j] == grid[0] else "highest"
        # the slice through the best point along this key: the other keys at their best values
        line = {
            c[j]: v
            for c, v in combos.items()
            if all(c[i] == best[i] for i in range(len(keys)) if i != j)
        }
        if _numeric(line):
            xs = sorted(line)
            entry["optimum"][key] = _vertex(xs, [line[x] for x in xs], best[j])
    entry["at_edge"] = bool(entry["edge"])
    return entry, list(chosen["run_id"])


def select(
    runs: pd.DataFrame, keys: list[str], variant: str = "variant"
) -> tuple[pd.DataFrame, dict]:
    """The arms' results (rows of `runs`, their order kept) and fit.json's `tuning` section."""
    check_keys(runs, keys)
    runs = runs.reset_index(drop=True)  # concatenated sources may repeat index labels
    labels = arm_labels(runs, variant)
    arms, chosen = [], []
    for arm, g in runs.groupby(labels, sort=False):
        entry, ids = _arm_entry(str(arm), g, keys, variant)
        arms.append(entry)
        chosen.extend(ids)
    arms.sort(key=lambda a: (a["variant"], a["N"], a["D"], a["arm"]))
    _mark_transfers(arms, runs, labels)
    selected = runs[runs["run_id"].isin(chosen)]
    section = {
        "keys": list(keys),
        "n_arms": len(arms),
        "n_runs": int(len(runs)),
        "n_selected": int(len(selected)),
        "n_stopped_early": sum(len(a["stopped_early"]) for a in arms),
        "n_curve_prefixes": sum(s["curve"] for a in arms for s in a["stopped_early"]),
        "arms": arms,
    }
    return selected.reset_index(drop=True), section


def _mark_transfers(arms: list[dict], runs: pd.DataFrame, labels: pd.Series) -> None:
    """`transferred_from`: the token budget whose choice an arm trained (`sweep.tune_at:
    smallest_budget`: its runs are all tagged tune_role `transfer`), the nearest tuned budget
    below it of the same variant and size (else the smallest; None when none is among the
    runs); absent from arms that were tuned."""
    if "tune_role" not in runs.columns:
        return
    roles = runs.groupby(labels, sort=False)["tune_role"].agg(lambda r: set(r.dropna()))
    moved = [a for a in arms if roles.get(a["arm"]) == {"transfer"}]
    for a in moved:
        tuned = sorted(
            b["D"]
            for b in arms
            if b not in moved and b["variant"] == a["variant"] and b["N"] == a["N"]
        )
        below = [d for d in tuned if d < a["D"]]
        a["transferred_from"] = below[-1] if below else (tuned[0] if tuned else None)


def lr_key(keys: list[str]) -> str | None:
    """The tuned learning rate: the first key whose last dotted part is 'lr'."""
    return next((k for k in keys if k.rsplit(".", 1)[-1] == "lr"), None)


def for_runs(section: dict, run_ids) -> dict:
    """The section restricted to the arms whose result is among `run_ids` (e.g. one variant)."""
    ids = set(map(str, run_ids))
    arms = [a for a in section["arms"] if set(a["selected"]) & ids]
    # every run belongs to exactly one arm, so the counts are the kept arms' sums (a group's
    # section must not report the whole sweep's runs)
    return {
        **section,
        "n_arms": len(arms),
        "arms": arms,
        "n_runs": sum(a["n_runs"] for a in arms),
        "n_selected": sum(len(a["selected"]) for a in arms),
        "n_stopped_early": sum(len(a["stopped_early"]) for a in arms),
        "n_curve_prefixes": sum(s["curve"] for a in arms for s in a["stopped_early"]),
    }


# ---------------------------------------------------------------- the lr rule


def fit_rule(x, y, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Weighted least squares of ln y = ln scale + exponent ln x for every row of `weights`
    (R, n): (scale, exponent), each (R,); nan where a row has fewer than 2 distinct x."""
    lx, ly, w = np.log(np.asarray(x, float)), np.log(np.asarray(y, float)), np.atleast_2d(weights)
    sw = w.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        mx, my = (w @ lx) / sw, (w @ ly) / sw
        sxx = (w * (lx[None, :] - mx[:, None]) ** 2).sum(axis=1)
        sxy = (w * (lx[None, :] - mx[:, None]) * (ly[None, :] - my[:, None])).sum(axis=1)
        exponent = sxy / sxx
    distinct = np.array([np.unique(lx[row > 0]).size for row in w])
    exponent = np.where((distinct >= 2) & (sxx > 0), exponent, np.nan)
    return np.exp(my - exponent * mx), exponent


def _rule(points: list[dict], variable: str, n_boot: int, seed: int) -> dict:
    x = np.array([p["x"] for p in points])
    y = np.array([p["y"] for p in points])
    if len(points) == 0:
        scale, exponent = np.array([np.nan]), np.array([np.nan])
    else:
        scale, exponent = fit_rule(x, y, np.ones((1, len(points))))
    reps = fit_rule(x, y, resample_counts(len(points), n_boot, seed)) if len(points) else None
    section = {
        "variable": variable,
        "scale": float(scale[0]),
        "exponent": float(exponent[0]),
        "ci95": intervals({"scale": reps[0], "exponent": reps[1]})
        if reps
        else {"scale": None, "exponent": None},
        "n_arms": len(points),
        "points": points,
    }
    reasons = identification.lr_rule(section, n_sizes=int(np.unique(x).size))
    return identification.with_reasons(section, reasons)


def lr_rule(section: dict, n_boot: int, seed: int, k: float = 1.0) -> dict | None:
    """fit.json's `lr_rule`: lr_opt = scale * N^exponent (and `in_C`: the same in C = k 6ND,
    k = 1 but for an encoder-decoder, `analysis.data.compute_factor`) from the arms whose lr was
    tuned (3+ grid values) and is not at its grid's edge."""
    key = lr_key(section["keys"])
    if key is None:
        return None
    points, left_out = [], {}
    for a in section["arms"]:
        grid = a["grid"][key]
        if len(grid) < 3 and a.get("transferred_from") is not None:
            left_out[a["arm"]] = (
                f"one value of {key}, transferred from D {a['transferred_from']:.3g}: "
                "not tuned at this arm"
            )
        elif len(grid) < 3:
            left_out[a["arm"]] = f"{len(grid)} value(s) of {key}: not tuned at this arm"
        elif key in a["edge"]:
            left_out[a["arm"]] = f"best {key} at the {a['edge'][key]} grid value: only a bound"
        elif key in a["optimum"]:
            points.append(
                {
                    "arm": a["arm"],
                    "N": a["N"],
                    "C": 6 * k * a["N"] * a["D"],
                    "lr": a["optimum"][key],
                }
            )
    in_n = _rule([{"arm": p["arm"], "x": p["N"], "y": p["lr"]} for p in points], "N", n_boot, seed)
    in_c = _rule([{"arm": p["arm"], "x": p["C"], "y": p["lr"]} for p in points], "C", n_boot, seed)
    return {"key": key, **in_n, "left_out": left_out, "n_boot": int(n_boot), "in_C": in_c}


def curve_points(
    runs: pd.DataFrame, section: dict, key: str, variant: str = "variant"
) -> pd.DataFrame:
    """Loss against `key` in every arm, the other tuned keys at the arm's best values: columns
    arm, variant, N, D, value, loss (mean over seeds), stopped (a halving loser, its loss at its
    own tokens), chosen (the arm's best value, full length)."""
    runs = runs.reset_index(drop=True)
    labels = arm_labels(runs, variant)
    rows = []
    for a in section["arms"]:
        g = runs[labels == a["arm"]]
        for k, v in a["best"].items():
            if k != key:
                g = g[g[k] == v]
        stopped = ~full_length(g, a["D"])
        for (value, is_stopped), part in g.groupby([key, stopped], sort=True):
            rows.append(
                {
                    "arm": a["arm"],
                    "variant": a["variant"],
                    "N": a["N"],
                    "D": a["D"],
                    "value": value,
                    "loss": float(part["loss"].mean()),
                    "stopped": bool(is_stopped),
                    "chosen": bool(not is_stopped and value == a["best"][key]),
                }
            )
    return pd.DataFrame(
        rows, columns=["arm", "variant", "N", "D", "value", "loss", "stopped", "chosen"]
    )
