"""Curve-aware tuning checked offline on a full grid: `analysis.tuning.tuning_check --strategy curve`.

Each arm of a full grid (every candidate trained to the arm's budget, e.g. conf/sweep/
demo_grid_dense.yaml) is tuned as `sweep.tune_curve` would tune it: every candidate's curve is
cut at the prefix the strategy trains (`analysis.tuning.curve_tuning.prefix_tokens`), its final loss
predicted from that prefix alone (`analysis.tuning.curve_tuning.predict_final`, the function the sweep
calls), the predicted best chosen. The candidates share the WSD stable phase, so a grid run's
first steps are exactly the prefix the strategy's segment trains, and the chosen one's decayed
run is the grid's run at that value (halving_check.md measures that replay: 0 nats). Needs the
train loss at every step: curves.csv exported with train_loss (`analysis.data.load.load_curves`).

Per arm: `rank` of the choice among the grid's candidates by final loss, `regret` (the grid's
loss at the choice minus its best), `margin` (the grid's second best minus its best: how
decisive the grid's own choice is). With the same grid run with another seed (`seed_runs`,
`--seed-grid`), `seed sd`: the spread of one run's final loss across seeds at that arm, a
robust standard deviation from the candidates' paired differences d (median |d| / (0.6745
sqrt 2): one run that leaves a plateau in one seed only does not set it). A choice whose
regret is within `seed sd` is one the grid, with one seed per candidate, cannot tell from its
best: the issue's "within the grid's one-seed margin".
"""

from __future__ import annotations

import functools
import math

import numpy as np
import pandas as pd

from analysis.data.load import InputError
from analysis.tuning import arms as tuning
from analysis.tuning import curve_tuning

TUNED_ROLES = ("candidate", "chosen")
# median |d| of two seeds' losses -> a robust sd of one run: |d| ~ half-normal with scale
# sd sqrt 2, whose median is 0.6745 sd sqrt 2
MEDIAN_ABS_TO_SD = 1.0 / (0.6745 * math.sqrt(2.0))
MATCH_RTOL = 1e-6  # N and D of the same candidate in two seeds' grids
WHO = {
    "staged": "the staged curve-law rule",
    "tissue": "the curve law from one prefix",
    "last": "the prefix's last train loss (baseline)",
}


def grid_arms(runs: pd.DataFrame):
    """(arm label, its candidates' rows) of every arm with 2+ runs at its largest budget."""
    runs = runs.reset_index(drop=True)
    for arm, g in runs.groupby(tuning.arm_labels(runs), sort=False):
        if "tune_role" in g.columns:
            g = g[g["tune_role"].isin(TUNED_ROLES)]
        g = g[g["D"] >= g["D"].max() * (1 - 1e-9)] if len(g) else g
        if len(g) >= 2:
            yield str(arm), g


def seed_sd(g: pd.DataFrame, other: pd.DataFrame | None, keys: list[str]) -> float:
    """The arm's one-seed spread (module docstring) from its candidates found in `other`, the
    same grid with another seed (nan without it, or with fewer than 3 candidates in both)."""
    if other is None:
        return math.nan
    same = other
    for col in ("variant", "N", "D"):
        if col in g.columns and col in other.columns:
            ref = g[col].iloc[0]
            if isinstance(ref, str):
                same = same[same[col] == ref]
            else:
                same = same[np.isclose(same[col].astype(float), float(ref), rtol=MATCH_RTOL)]
    pairs = g[[*keys, "loss"]].merge(same[[*keys, "loss"]], on=keys, suffixes=("", "_other"))
    d = (pairs["loss"] - pairs["loss_other"]).abs().dropna()
    return float(d.median() * MEDIAN_ABS_TO_SD) if len(d) >= 3 else math.nan


def _cut(row: dict, curves: dict, upto: int, predict, first: int):
    """(the rule's value, points seen) of one candidate's curve cut at `upto` tokens."""
    pts = curves.get(row["run_id"])
    tokens, loss = (pts["tokens"], pts["train_loss"]) if pts is not None else ([], [])
    seen = curve_tuning.prefix_points(row, tokens, loss, upto, first)[0].size
    return predict(row, tokens, loss, upto), seen


def _arm_row(g: pd.DataFrame, keys: list[str], first_rung: int, seen: list[int], cost: float):
    """(the arm's row of the check without its choice, a function of a run id to the choice's
    columns: the value as written, its rank among the grid's final losses, its regret)."""
    losses = dict(zip(g["run_id"], g["loss"].astype(float)))
    label = {r: tuning.combo_text(keys, tuple(v)) for r, *v in g[["run_id", *keys]].values}
    ordered = sorted(losses, key=losses.get)
    budget = float(g["D"].max())
    row = {
        "variant": g["variant"].iloc[0] if "variant" in g.columns else "",
        "N": float(g["N"].iloc[0]),
        "D": budget,
        "n_grid": len(g),
        "prefix_tokens": first_rung,
        "points": f"{min(seen)}-{max(seen)}",
        "grid_choice": label[ordered[0]],
        "margin": losses[ordered[1]] - losses[ordered[0]],
        "cost_runs": cost / budget,
    }

    def choice(pick: str) -> dict:
        regret = losses[pick] - losses[ordered[0]]
        return {"choice": label[pick], "rank": 1 + ordered.index(pick), "regret": regret}

    return row, choice


def check_arm(
    g: pd.DataFrame, curves: dict, keys: list[str], runs_allowed: float, rule, first: int
) -> dict:
    """The strategy's choice at one arm against the grid's (`rule`: a `curve_tuning.RULES`
    function of the candidate's row, tokens, train losses and prefix end; `first`: the first
    step it fits, for the points column)."""
    budget = int(g["D"].max())
    bt = int(g["train.batch_tokens"].iloc[0])
    upto = curve_tuning.prefix_tokens(len(g), budget, bt, runs_allowed)
    preds, seen = {}, []
    for row in g.to_dict("records"):
        preds[row["run_id"]], n = _cut(row, curves, upto, rule, first)
        seen.append(n)
    cost = curve_tuning.cost_tokens(len(g), budget, upto)
    out, choice = _arm_row(g, keys, upto, seen, cost)
    finite = {r: p for r, p in preds.items() if math.isfinite(p)}
    if not finite:
        return {**out, "choice": "none (too few points)", "rank": 0, "regret": math.nan}
    return {**out, **choice(min(finite, key=finite.get))}


def staged_arm(
    g: pd.DataFrame,
    curves: dict,
    keys: list[str],
    runs_allowed: float,
    z: float,
    predict=curve_tuning.predict,
):
    """The staged rule (`curve_tuning.decide`) replayed at one arm of a full grid: at each rung
    the alive candidates' curves cut there, predicted, decided; the choice against the grid's
    best, the compute it spent (runs of the budget) and the rung it decided at (`predict`:
    `curve_tuning.predict` or a memo of it)."""
    budget = int(g["D"].max())
    bt = int(g["train.batch_tokens"].iloc[0])
    rows = {r["run_id"]: r for r in g.to_dict("records")}
    stable = curve_tuning.decay_start(next(iter(rows.values()))) * bt  # the sweep's rungs stop here
    rungs = curve_tuning.staged_rungs(len(g), budget, bt, runs_allowed, stable=stable)
    alive, counts, seen = list(rows), [], []
    for k, upto in enumerate(rungs):
        counts.append(len(alive))
        preds = {}
        for rid in alive:
            preds[rid], n = _cut(rows[rid], curves, upto, predict, curve_tuning.FIRST_STEP)
            seen.append(n)
        decision = curve_tuning.decide(preds, k == len(rungs) - 1, z)
        if decision.chosen is not None or decision.finalists:
            break
        alive = list(decision.keep)
    losses = dict(zip(g["run_id"], g["loss"].astype(float)))
    # finalists: each decays to the budget (its grid run) and the measured loss chooses
    pick = decision.chosen or min(decision.finalists, key=losses.get)
    decayed = max(1, len(decision.finalists))
    cost = curve_tuning.staged_cost(len(g), budget, rungs, counts, decayed)
    out, choice = _arm_row(g, keys, rungs[0], seen, cost)
    return {**out, **choice(pick), "decided_at": f"{len(counts)}/{len(rungs)}", "why": decision.why}


def check(
    runs: pd.DataFrame,
    points: pd.DataFrame,
    keys: list[str],
    runs_allowed: float | None = None,
    rule="tissue",
    seed_runs: pd.DataFrame | None = None,
    first_step: int | None = None,
    z: float | None = None,
    predict=None,
):
    """One row per arm of the full grid (`check_arm`, plus `seed_sd` from `seed_runs`, the
    same grid with another seed); `rule`: `staged` (the strategy's default:
    `curve_tuning.decide` at rungs t, 2t, 4t, `runs_allowed` its worst case, `z` its
    separation), or a one-rung `curve_tuning.RULES` entry (`tissue`: the predicted best;
    `last`: the prefix's last train losses, a baseline); `first_step`: the curve law's first
    step fitted by the one-rung rules, instead of `curve_tuning.FIRST_STEP`; `predict`: a memo
    of `curve_tuning.predict` (`analysis.tuning.tuning_validation` replays the same fits)."""
    if "train_loss" not in points.columns or points["train_loss"].notna().sum() == 0:
        raise InputError(
            "--curves: no train_loss column (curves.csv exported before the dense export); "
            "curve-aware tuning needs the train loss at every step"
        )
    for col in ("train.batch_tokens", "train.lr", "D", "loss", *keys):
        if col not in runs.columns:
            raise InputError(f"--grid: no column '{col}'")
    dense = points.dropna(subset=["train_loss"])
    curves = dict(tuple(dense.groupby("run_id", sort=False)))
    first = curve_tuning.FIRST_STEP if first_step is None else first_step
    if runs_allowed is None:
        runs_allowed = curve_tuning.STAGED_RUNS if rule == "staged" else curve_tuning.RUNS
    if rule == "staged":
        z = curve_tuning.Z if z is None else z
        arm = functools.partial(staged_arm, curves=curves, keys=keys, runs_allowed=runs_allowed)
        check_one = lambda g: arm(g, z=z, predict=predict or curve_tuning.predict)  # noqa: E731
    else:
        how = curve_tuning.RULES[rule]
        if rule == "tissue" and predict is not None and first == curve_tuning.FIRST_STEP:
            how = lambda *a: predict(*a).final  # noqa: E731
        elif rule == "tissue":
            how = functools.partial(how, first=first)
        check_one = lambda g: check_arm(g, curves, keys, runs_allowed, how, first)  # noqa: E731
    if seed_runs is not None:
        for col in ("loss", *keys):
            if col not in seed_runs.columns:
                raise InputError(f"--seed-grid: no column '{col}'")
    rows = [{**check_one(g), "seed_sd": seed_sd(g, seed_runs, keys)} for _, g in grid_arms(runs)]
    if not rows:
        raise InputError("--grid: no arm with two or more candidates at its budget")
    return pd.DataFrame(rows)


def check_sd(runs: pd.DataFrame, other: pd.DataFrame, keys: list[str]) -> np.ndarray:
    """`seed_sd` of every arm `check` returns a row for, in its order."""
    return np.array([seed_sd(g, other, keys) for _, g in grid_arms(runs)], dtype=float)


def successes(table: pd.DataFrame) -> tuple[pd.Series, str]:
    """Which arms' choices count, and by what: within one seed's spread where the other seed's
    grid measured it, else within the second-best gap (a proxy: it can be far below or above
    the seed noise)."""
    if table["seed_sd"].notna().all():
        return table["regret"] <= table["seed_sd"] + 1e-12, "one seed's spread (seed sd)"
    return table["regret"] <= table["margin"] + 1e-12, "the grid's second-best gap (margin)"


def markdown(table: pd.DataFrame, runs_allowed: float, rule: str = "tissue") -> str:
    """The check as report text: the count against the target, then one row per arm."""
    ok, by = successes(table)
    gap = int((table["regret"] <= table["margin"] + 1e-12).sum())
    agree = int((table["rank"] == 1).sum())
    staged = "decided_at" in table.columns
    spent = (
        f"at most {runs_allowed:g} runs' compute per arm (spent: {table['cost_runs'].mean():.2f} "
        f"runs on average, {table['cost_runs'].max():.2f} at most; each of "
        f"{int(table['n_grid'].max())} candidates seeing "
        f"{int(table['prefix_tokens'].min())}-{int(table['prefix_tokens'].max())} tokens at the "
        "first rung)"
        if staged
        else f"{runs_allowed:g} runs' compute per arm ({table['cost_runs'].max():.2f} runs "
        f"exact, each of {int(table['n_grid'].max())} candidates seeing "
        f"{int(table['prefix_tokens'].min())}-{int(table['prefix_tokens'].max())} tokens)"
    )
    lines = [
        "# Curve-aware tuning against the full grid",
        "",
        f"At {spent}, "
        f"{WHO[rule]} chose the grid's best at {agree} of {len(table)} arms and a value "
        f"within {by} of it at {int(ok.sum())} of {len(table)}"
        + (
            f" (within the second-best gap: {gap})."
            if table["seed_sd"].notna().all()
            else " (no other seed's grid: --seed-grid measures the seed spread)."
        ),
    ]
    off = table[~ok & np.isfinite(table["regret"])]
    if len(off):
        worst = off.loc[off["regret"].idxmax()]
        lines.append(
            f"Where it missed, its choice costs {off['regret'].mean():.3f} nats on average "
            f"(worst {worst['regret']:.3f}: {worst['variant']} at N={worst['N']:.3g}, "
            f"{worst['choice']} instead of {worst['grid_choice']})."
        )
    lines.append(
        f"Mean regret {np.nanmean(table['regret']):.3f} nats, worst "
        f"{np.nanmax(table['regret']):.3f}; {int((table['rank'] > table['n_grid'] / 2).sum())} "
        "choice(s) in the bottom half of a grid."
    )
    head = ["variant", "N", "D", "points", "curve chose", "grid chose", "rank", "regret"]
    head += ["margin", "seed sd"]
    if staged:
        head += ["runs", "decided", "why"]
    body = []
    for r in table.itertuples():
        row = (
            f"| {r.variant} | {r.N:.3g} | {r.D:.3g} | {r.points} | {r.choice} | {r.grid_choice} "
            f"| {r.rank}/{r.n_grid} | {r.regret:.3f} | {r.margin:.3f} | {_num(r.seed_sd)} |"
        )
        if staged:
            row += f" {r.cost_runs:.2f} | rung {r.decided_at} | {r.why} |"
        body.append(row)
    grid = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head), *body]
    return "\n".join([*lines, "", *grid, ""])


def _num(x: float) -> str:
    return f"{x:.3f}" if math.isfinite(x) else "n/a"
