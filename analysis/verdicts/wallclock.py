"""Effective speedup in time: the wall-clock a baseline needs to match a variant's loss.

The compute multiplier m(C) (`analysis.verdicts.ablation`) says how much more compute the baseline needs
for the loss the variant reaches with C. On real hardware a FLOP of one architecture does not
take as long as a FLOP of another (GQA at tiny widths, SwiGLU's three matrices), so the time
multiplier folds in each arm's measured throughput:

    tau(C) = (m(C) C / F_base) / (C / F_variant) = m(C) rho,   rho = F_variant / F_base

with F = C / D x tokens/s, the FLOP/s a run sustains in the report's compute convention, and
rho the geometric mean over the cells both arms trained (same budget, same size rank) of their
ratio. tau > 1: the baseline needs tau times the variant's wall-clock for the same loss. A run's
tokens/s is the median of its logged `tokens_per_sec` (training excludes evaluation and
checkpoint time from it) after the first log window and the first WARMUP_FRACTION of its
tokens (`steady_median`, applied by `analysis.data.load`). Intervals: m's bootstrap replicates
(`ablation.multiplier_draws`) times an independent bootstrap of rho over the matched cells;
verdicts (faster / slower / cannot tell) at measured budgets only, Holm over every measured
variant x budget cell, as the compute multiplier's. Runs without throughput (a runs.csv exported
before it was) get no time multiplier, and the report says it was not recorded.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.fits.bootstrap import percentile_interval, resample_counts
from analysis.fits.estimate import est, fmt
from analysis.fits.isoflop import budget_groups
from analysis.verdicts.ablation import FAMILY_LEVEL, holm_adjust, multiplier_draws, percentile_p

THROUGHPUT = "tokens_per_sec"
WARMUP_FRACTION = 0.1  # of a run's tokens: allocator, caches and compilation settle first
# MLflow params of the hardware a run was measured on -> runs.csv columns (training.trainer)
HARDWARE = {
    "hardware.device": "device",
    "torch_threads": "threads",
    "hardware.precision": "precision",
    "hardware.compile": "compile",
}
# the committed reports quote this sentence (module path included): a new path means regenerating them
NOT_RECORDED = (
    "Time multiplier: not recorded for these runs (they have no tokens_per_sec column; "
    "`analysis.load` exports it from runs that logged throughput), so only the compute "
    "multiplier is stated."
)


def steady_median(tokens, values) -> float:
    """Median of a run's logged throughput after warm-up: the points past its first log window
    and past WARMUP_FRACTION of its last step (all points where that leaves none); nan if none."""
    tokens, values = np.asarray(tokens, dtype=float), np.asarray(values, dtype=float)
    ok = np.isfinite(values) & np.isfinite(tokens)
    tokens, values = tokens[ok], values[ok]
    if values.size == 0:
        return float("nan")
    steady = tokens > max(tokens.min(), WARMUP_FRACTION * tokens.max())
    return float(np.median(values[steady] if steady.any() else values))


def recorded(runs: pd.DataFrame) -> bool:
    """Every run has a finite, positive throughput."""
    if THROUGHPUT not in runs.columns:
        return False
    tps = pd.to_numeric(runs[THROUGHPUT], errors="coerce")
    return bool(((tps > 0) & np.isfinite(tps)).all())


def flops_per_sec(runs: pd.DataFrame) -> pd.Series:
    """FLOP/s each run sustained, in the convention of its C: C / D x tokens/s."""
    return runs["C"] / runs["D"] * pd.to_numeric(runs[THROUGHPUT])


def hardware(runs: pd.DataFrame) -> str:
    """'cpu: AMD EPYC, 2 threads, fp32, not compiled' (each distinct setting once), or what
    is unknown."""
    parts = []
    for col in HARDWARE.values():
        if col not in runs.columns or runs[col].isna().all():
            parts.append(f"{col} not recorded")
            continue
        values = [_setting(col, v) for v in pd.unique(runs[col].dropna())]
        parts.append(" / ".join(values) + ("" if len(values) == 1 else " (mixed)"))
    return ", ".join(parts)


def _setting(col: str, value) -> str:
    if col == "threads":
        return f"{int(float(value))} threads"
    if col == "compile":
        return "compiled" if str(value).lower() in ("true", "1", "1.0") else "not compiled"
    return str(value)


def matched_cells(runs: pd.DataFrame, variant: str, baseline: str) -> pd.DataFrame:
    """Per cell both arms trained (budget group, size rank within it): each arm's FLOP/s
    (geometric mean over seeds) and their ratio variant / baseline."""
    runs = runs[runs["variant"].isin([variant, baseline])]
    runs = runs.assign(budget=budget_groups(runs["C"]), log_f=np.log(flops_per_sec(runs)))
    runs = runs.assign(size=runs.groupby(["variant", "budget"])["N"].rank(method="dense"))
    cells = runs.groupby(["budget", "size", "variant"])["log_f"].mean().unstack("variant")
    cells = cells.dropna()
    if cells.empty:
        return pd.DataFrame(columns=["F_variant", "F_base", "ratio"])
    return pd.DataFrame(
        {
            "F_variant": np.exp(cells[variant]),
            "F_base": np.exp(cells[baseline]),
            "ratio": np.exp(cells[variant] - cells[baseline]),
        }
    ).reset_index(drop=True)


def ratio_draws(ratios: np.ndarray, n_boot: int, seed: int) -> tuple[float, np.ndarray]:
    """(geometric mean of the cells' FLOP/s ratios, its (R,) bootstrap over cells)."""
    logs = np.log(np.asarray(ratios, dtype=float))
    counts = resample_counts(logs.size, n_boot, seed)
    return float(np.exp(logs.mean())), np.exp(counts @ logs / logs.size)


def section(runs: pd.DataFrame, ablation: dict, n_boot: int, seed: int) -> dict:
    """fit.json's `ablation.time`: {"recorded": false} without throughput; else the hardware,
    each arm's throughput, and per variant rho and tau at every budget of its multipliers."""
    if not recorded(runs):
        return {"recorded": False}
    base = ablation["baseline"]
    variants = [v for v in ablation["variants"] if v != base]
    budgets = {
        v: np.array([m["C"] for m in ablation["variants"][v]["multipliers"]]) for v in variants
    }
    draws = multiplier_draws(runs, budgets, baseline=base, n_boot=n_boot, seed=seed)
    out: dict = {"recorded": True, "hardware": hardware(runs), "throughput": throughput(runs)}
    out["variants"] = {
        v: _variant_time(runs, ablation, v, draws[v], n_boot, seed + 7919 + i)
        for i, v in enumerate(variants)
    }
    cells = [m for res in out["variants"].values() for m in res["multipliers"] if m["measured"]]
    for m, p_holm in zip(cells, holm_adjust(np.array([m["p"] for m in cells]))):
        m["p_holm"] = float(p_holm)
        if not np.isfinite(p_holm):
            m["verdict"] = "not identified"
        elif p_holm < FAMILY_LEVEL:
            m["verdict"] = "faster" if m["multiplier"] > 1 else "slower"
        else:
            m["verdict"] = "cannot tell"
    out["n_comparisons"] = len(cells)
    return out


def throughput(runs: pd.DataFrame) -> dict:
    """{variant: median tokens/s, FLOP/s and MFU over its runs, and their count}."""
    runs = runs.assign(flops_per_sec=flops_per_sec(runs))
    out = {}
    for v, g in runs.groupby("variant", sort=True):
        out[v] = {
            "n_runs": int(len(g)),
            "tokens_per_sec": float(pd.to_numeric(g[THROUGHPUT]).median()),
            "flops_per_sec": float(g["flops_per_sec"].median()),
            "mfu": float(pd.to_numeric(g["mfu"]).median()) if "mfu" in g.columns else None,
        }
    return out


def _variant_time(runs, ablation, v: str, draw, n_boot: int, seed: int) -> dict:
    """rho with its interval and tau at every budget of variant v (verdicts come later)."""
    cells = matched_cells(runs, v, ablation["baseline"])
    bad = ablation["variants"][v].get("why_not_identified", {}).get("multipliers")
    if cells.empty or bad:
        why = bad or "no budget and size trained by both arms"
        return {"rho": None, "rho_ci95": None, "n_cells": 0, "why": why, "multipliers": []}
    rho, rho_reps = ratio_draws(cells["ratio"].to_numpy(), n_boot, seed)
    point, boot = draw
    rows = []
    for k, m in enumerate(ablation["variants"][v]["multipliers"]):
        tau, reps = point[k] * rho, boot[:, k] * rho_reps
        rows.append(
            {
                "C": m["C"],
                "measured": m["measured"],
                "compute_multiplier": m["multiplier"],
                "multiplier": float(tau),
                "ci95": percentile_interval(reps),
                "p": percentile_p(tau, reps),
                "p_holm": float("nan"),
                "verdict": None,
            }
        )
    return {
        "rho": rho,
        "rho_ci95": percentile_interval(rho_reps),
        "n_cells": int(len(cells)),
        "multipliers": rows,
    }


# ---------------------------------------------------------------- report blocks


def summary_blocks(ablation: dict) -> list[tuple]:
    """The summary's time-multiplier table at each variant's largest measured budget, or the
    sentence that it was not recorded."""
    time = ablation.get("time")
    if not time:
        return []
    if not time["recorded"]:
        return [("p", NOT_RECORDED)]
    rows, sentences = [], []
    for v, res in time["variants"].items():
        measured = [m for m in res["multipliers"] if m["measured"]]
        if not measured:
            rows.append([v, "", "", "", "not identified", "n/a"])
            continue
        m = measured[-1]
        compute = ablation["variants"][v]["multipliers"][len(measured) - 1]
        rows.append(
            [
                v,
                f"{m['C']:.3g}",
                est(compute["multiplier"], compute["ci95"], ".3g"),
                est(res["rho"], res["rho_ci95"], ".3g"),
                est(m["multiplier"], m["ci95"], ".3g"),
                m["verdict"],
            ]
        )
        sentences.append(_time_sentence(v, ablation["baseline"], compute, res["rho"], m))
    lead = (
        f"Wall-clock on {time['hardware']}: the time multiplier tau = m x rho, rho = the "
        "variant's FLOP/s over the baseline's at matched budgets and sizes (median tokens/s "
        "per run after warm-up, evaluation excluded). tau > 1: the baseline needs tau times "
        f"the variant's wall-clock for the same loss. Holm over {time['n_comparisons']} "
        "measured cells; the throughput of each arm is under 'Ablations' below."
    )
    header = ["variant", "C", "compute multiplier m", "FLOP/s ratio rho", "time multiplier tau"]
    return [
        ("p", lead),
        ("table", [*header, "verdict (time)"], rows),
        ("list", sentences),
    ]


def _time_sentence(v: str, base: str, compute: dict, rho: float, m: dict) -> str:
    """What the time multiplier adds to the compute verdict, in one sentence."""
    flops = "saves" if compute["multiplier"] > 1 else "costs"
    speed = "faster" if rho > 1 else "slower"
    return (
        f"{v} {flops} compute (m {compute['multiplier']:.3g}, {compute.get('verdict')}) and "
        f"runs {rho:.3g}x {base}'s FLOP/s ({speed} per FLOP): in wall-clock "
        f"tau {m['multiplier']:.3g}, {m['verdict']} at C = {m['C']:.3g}."
    )


def detail_blocks(ablation: dict) -> list[tuple]:
    """Every arm's throughput and the time multiplier at every budget (measured and
    extrapolated), for the Ablations section."""
    time = ablation.get("time")
    if not time or not time["recorded"]:
        return []
    tput = [
        [
            v,
            t["n_runs"],
            fmt(t["tokens_per_sec"], ".4g"),
            fmt(t["flops_per_sec"], ".3g"),
            fmt(t["mfu"], ".3g"),
        ]
        for v, t in time["throughput"].items()
    ]
    rows = [
        [
            v,
            f"{m['C']:.3g}",
            "measured" if m["measured"] else "extrapolated",
            fmt(m["compute_multiplier"], ".3g"),
            est(m["multiplier"], m["ci95"], ".3g"),
            fmt(m["p_holm"], ".3f") if m["measured"] else "",
            m["verdict"] or "n/a (extrapolated)",
        ]
        for v, res in time["variants"].items()
        for m in res["multipliers"]
    ]
    return [
        ("p", f"Throughput per arm (median over its runs), measured on {time['hardware']}:"),
        ("table", ["variant", "runs", "tokens/s", "FLOP/s", "MFU"], tput),
        (
            "table",
            ["variant", "C", "scale", "m", "time multiplier [95% CI]", "p (Holm)", "verdict"],
            rows,
        ),
    ]
