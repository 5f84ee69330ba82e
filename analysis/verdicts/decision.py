"""Decision accuracy of an ablation ladder: would the verdict at a small budget have held?

Per pair (each variant against the baseline) the verdict at every measured budget is the
ablation's (`analysis.verdicts.ablation`: better / worse / cannot tell after Holm, or not identified).
The reference is the verdict at the pair's largest measured budget; a smaller budget agrees when
its verdict is the same. Two rates are reported against the compute fraction C / C_largest:

- verdict agreement: the same three-valued verdict (a "cannot tell" that becomes "better" at
  the largest budget disagrees), over the cells where both are identified;
- sign agreement (DataDecide's, arXiv 2504.11393, which compares the sign of the difference
  at small scale with the sign at the target scale over every pair, without a significance
  test): m > 1 at the small budget iff m > 1 at the largest.

Differences from DataDecide's decision accuracy: pairs are variant vs the baseline only (not
all pairs of variants), the reference is this ladder's largest measured budget (not a separate
target-scale model averaged over seeds), and the three-valued rate counts an undecided cell as a
verdict of its own. With `--target-compute C_t` the fitted laws' multiplier at C_t is shown with
its bootstrap interval as an extrapolation (not a measurement, so no verdict): its interval above
1, below 1, or including 1, and whether each measured verdict points the same way.
"""

from __future__ import annotations

import argparse

import numpy as np
import pandas as pd

from analysis.fits.bootstrap import percentile_interval
from analysis.fits.estimate import est, fmt
from analysis.fits.isoflop import budget_groups
from analysis.verdicts import wallclock
from analysis.verdicts.ablation import multiplier_draws

DECIDED = ("better", "worse")
# what an extrapolated interval says, and the measured verdict that points the same way
DIRECTION = {"above 1": "better", "below 1": "worse", "includes 1": "cannot tell"}


def add_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--target-compute",
        type=float,
        help="an ablation's decision accuracy also compares each measured verdict with the "
        "fitted laws' multiplier extrapolated to this compute C (FLOPs), shown with its "
        "interval as an extrapolation",
    )


def verdicts(ablation: dict) -> pd.DataFrame:
    """One row per variant x measured budget: variant, C, fraction (C / the variant's largest
    measured C), multiplier, verdict, reference (the verdict at the largest), agrees,
    sign_agrees, largest (whether this row is the reference)."""
    rows = []
    for v, res in ablation["variants"].items():
        if v == ablation["baseline"]:
            continue
        measured = [m for m in res["multipliers"] if m["measured"]]
        if not measured:
            continue
        top = measured[-1]
        for m in measured:
            rows.append(_verdict_row(v, m, top))
    columns = ["variant", "C", "fraction", "multiplier", "verdict", "reference"]
    frame = pd.DataFrame(rows, columns=[*columns, "agrees", "sign_agrees", "largest"])
    return frame


def _verdict_row(v: str, m: dict, top: dict) -> dict:
    verdict, reference = m["verdict"] or "not identified", top["verdict"] or "not identified"
    identified = "not identified" not in (verdict, reference)
    better, top_better = _better(m), _better(top)
    signs = better is not None and top_better is not None
    return {
        "variant": v,
        "C": m["C"],
        "fraction": m["C"] / top["C"],
        "multiplier": m["multiplier"],
        "verdict": verdict,
        "reference": reference,
        "agrees": (verdict == reference) if identified else None,
        "sign_agrees": (better == top_better) if signs else None,
        "largest": m is top,
    }


def _better(m: dict) -> bool | None:
    """Whether m > 1 at a measured cell: the variant's loss below the baseline's at the same
    compute (a bound on m has no sign of its own); None where that is not known."""
    gap = m.get("loss_gap")
    if gap is not None:
        return bool(gap < 0) if np.isfinite(gap) else None
    return bool(m["multiplier"] > 1) if np.isfinite(m["multiplier"]) else None


def agreement(table: pd.DataFrame) -> pd.DataFrame:
    """Agreement with the largest budget per budget level (the budgets of every pair grouped
    within 10%, `isoflop.budget_groups`), the largest excluded: fraction (median C / C_largest),
    cells, verdict_agreement and sign_agreement (shares of the cells that have one)."""
    small = table[~table["largest"]]
    columns = ["fraction", "cells", "verdict_agreement", "sign_agreement"]
    if small.empty:
        return pd.DataFrame(columns=columns)
    small = small.assign(level=budget_groups(small["fraction"]))
    out = small.groupby("level", sort=True).agg(
        fraction=("fraction", "median"),
        cells=("variant", "size"),
        verdict_agreement=("agrees", _share),
        sign_agreement=("sign_agrees", _share),
    )
    return out.reset_index(drop=True)[columns]


def _share(values: pd.Series) -> float:
    known = values.dropna()
    return float(known.astype(bool).mean()) if len(known) else float("nan")


def disagreements(table: pd.DataFrame) -> list[str]:
    """One plain sentence per pair whose smaller budgets disagree with its largest."""
    out = []
    for v, g in table.groupby("variant", sort=False):
        small = g[~g["largest"]]
        differ = small[small["agrees"] == False]  # noqa: E712 (None: not identified)
        if differ.empty:
            continue
        ref = g[g["largest"]].iloc[0]
        flips = differ[differ["verdict"].isin(DECIDED) & differ["reference"].isin(DECIDED)]
        kind = "the opposite verdict" if len(flips) else "a different verdict"
        cells = ", ".join(f"{r.verdict} at C = {r.C:.3g}" for r in differ.itertuples())
        out.append(
            f"{v}: {len(differ)} of {len(small)} smaller budgets give {kind} than the largest "
            f"measured one ({ref['verdict']} at C = {ref['C']:.3g}): {cells}."
        )
    return out


def target_section(runs, ablation: dict, target: float, n_boot: int, seed: int) -> dict:
    """Each variant's multiplier at `target` from its fitted laws, with its interval and what
    the interval says (above 1 / below 1 / includes 1); never a verdict."""
    base = ablation["baseline"]
    variants = [v for v in ablation["variants"] if v != base]
    draws = multiplier_draws(
        runs, {v: [target] for v in variants}, baseline=base, n_boot=n_boot, seed=seed
    )
    top = max(
        m["C"] for res in ablation["variants"].values() for m in res["multipliers"] if m["measured"]
    )
    out = {"C": float(target), "beyond_measured": bool(target > top), "variants": {}}
    for v in variants:
        point, boot = draws[v]
        ci = percentile_interval(boot[:, 0])
        bad = ablation["variants"][v].get("why_not_identified", {}).get("multipliers")
        direction = None if (ci is None or bad) else _direction(ci)
        out["variants"][v] = {"multiplier": float(point[0]), "ci95": ci, "direction": direction}
    return out


def _direction(ci: list[float]) -> str:
    return "above 1" if ci[0] > 1 else "below 1" if ci[1] < 1 else "includes 1"


def section(runs, ablation: dict, target: float | None, n_boot: int, seed: int) -> dict:
    """fit.json's `ablation.decision`: every measured verdict, the agreement per budget level,
    overall rates, the plain disagreements, and with a target the laws' extrapolation there."""
    table = verdicts(ablation)
    levels = agreement(table)
    small = table[~table["largest"]]
    out = {
        "cells": table.to_dict(orient="records"),
        "levels": levels.to_dict(orient="records"),
        "verdict_agreement": _share(small["agrees"]),
        "sign_agreement": _share(small["sign_agrees"]),
        "n_smaller": int(len(small)),
        "disagreements": disagreements(table),
        "target": None,
    }
    if target is not None and len(table):
        out["target"] = target_section(runs, ablation, target, n_boot, seed)
        for cell in out["cells"]:
            t = out["target"]["variants"][cell["variant"]]["direction"]
            cell["agrees_with_target"] = None if t is None else cell["verdict"] == DIRECTION[t]
    return out


def sections(runs, ablation: dict, args) -> dict:
    """fit.json's `ablation.time` (`wallclock.section`) and `ablation.decision` of a report's
    --bootstrap, --seed and --target-compute."""
    return {
        "time": wallclock.section(runs, ablation, args.bootstrap, args.seed),
        "decision": section(runs, ablation, args.target_compute, args.bootstrap, args.seed),
    }


# ---------------------------------------------------------------- report blocks


def summary_blocks(ablation: dict) -> list[tuple]:
    """The summary's decision accuracy: overall rates, a plain sentence on disagreements, the
    laws' extrapolation to the target (when given)."""
    d = ablation.get("decision")
    if not d or not d["cells"]:
        return []
    if d["n_smaller"] == 0:
        return [("p", "Decision accuracy: every pair is measured at one budget only.")]
    lead = (
        f"Decision accuracy over the ladder: of the {d['n_smaller']} verdicts at budgets "
        "below each pair's largest measured one, "
        f"{_pct(d['verdict_agreement'])} give the same verdict as the largest (better / worse "
        f"/ cannot tell) and {_pct(d['sign_agreement'])} the same sign of m - 1 (DataDecide's "
        "pairwise rule; by budget in the figure and under 'Decision accuracy' below)."
    )
    b: list[tuple] = [("p", lead)]
    if d["disagreements"]:
        b.append(("p", "The small budgets disagree with the largest:"))
        b.append(("list", d["disagreements"]))
    elif d["verdict_agreement"] != d["verdict_agreement"]:  # nan: nothing to compare
        b.append(("p", "No smaller budget has an identified verdict to compare with the largest."))
    else:
        b.append(("p", "Every smaller budget agrees with its pair's largest measured verdict."))
    b.extend(_target_blocks(d["target"]))
    return b


def _pct(x: float) -> str:
    return "n/a" if x != x else f"{100 * x:.0f}%"


def _target_blocks(t: dict | None) -> list[tuple]:
    if t is None:
        return [
            (
                "p",
                "No --target-compute given: the fitted laws' extrapolation to a budget "
                "you name is not shown.",
            )
        ]
    where = (
        "beyond the largest measured budget"
        if t["beyond_measured"]
        else "inside the measured range"
    )
    items = [
        f"{v}: m = {est(r['multiplier'], r['ci95'], '.3g')}, interval "
        f"{r['direction'] or 'not identified'}"
        for v, r in t["variants"].items()
    ]
    return [
        (
            "p",
            f"Extrapolation, not a measurement: the fitted laws' multiplier at C = "
            f"{t['C']:.3g} ({where}), 95% bootstrap interval:",
        ),
        ("list", items),
    ]


def detail_blocks(ablation: dict) -> list[tuple]:
    """Every measured verdict with its reference, and the agreement per budget level."""
    d = ablation.get("decision")
    if not d or not d["cells"]:
        return []
    with_target = d["target"] is not None
    header = ["variant", "C", "C / largest", "m", "verdict", "verdict at largest", "agrees"]
    rows = []
    for c in d["cells"]:
        row = [
            c["variant"],
            f"{c['C']:.3g}",
            f"{c['fraction']:.3g}",
            fmt(c["multiplier"], ".3g"),
            c["verdict"],
            c["reference"],
            "(largest)" if c["largest"] else _yes(c["agrees"]),
        ]
        if with_target:
            row.append(_yes(c.get("agrees_with_target")))
        rows.append(row)
    if with_target:
        header.append(f"same way as the laws at {d['target']['C']:.3g}")
    levels = [
        [
            f"{r['fraction']:.3g}",
            r["cells"],
            _pct(r["verdict_agreement"]),
            _pct(r["sign_agreement"]),
        ]
        for r in d["levels"]
    ]
    return [
        ("h2", "Decision accuracy: verdicts at smaller budgets against the largest"),
        ("table", header, rows),
        ("table", ["C / largest (median)", "cells", "same verdict", "same sign of m - 1"], levels),
    ]


def _yes(x) -> str:
    return "n/a" if x is None else "yes" if x else "no"


CAPTION = (
    "Decision accuracy: the share of verdicts at smaller budgets that agree with each pair's "
    "verdict at its largest measured budget, against the compute fraction; circles the same "
    "verdict (better / worse / cannot tell, Holm), squares the same sign of m - 1."
)
