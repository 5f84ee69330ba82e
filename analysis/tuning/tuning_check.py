"""Does successive halving (or curve-aware tuning: a sweep's runs whose prefixes carry the tag
`tune_budget`) choose what the full grid would? Per arm, the value halving chose
against the one the full grid chooses, and what the difference costs in loss.

    python -m analysis.tuning_check --tuned results/ref_ablation_tuned/runs.csv \
        --grid results/ref_ablation_tuned/grid/runs.csv --tune train.lr --tune train.warmup \
        [--out results/ref_ablation_tuned/halving_check.md]

--tuned: a tuned sweep's runs (its `tune_role` column): each tuned arm's result, the run tagged
`chosen`, is checked, against the values its `candidate` segments compared; arms that trained a
transferred value are not. --grid: the same arms with every candidate trained to the budget
(`tune_halving: false`, e.g. conf/sweep/ref_ablation_tuned_grid.yaml). Arms match on
variant x N x D (arm ids are run keys, which differ between sweeps). Per arm:

- the grid is restricted to the values halving compared (a wider grid's others are left out);
- `rank`: halving's choice among the grid's candidates by final loss (1: the grid's choice);
- `regret`: the grid's loss at halving's choice minus the grid's best (0 where they agree):
  what the choice costs at this arm, in nats;
- `margin`: the grid's second-best loss minus its best. With one seed per candidate this is how
  decisive the grid's own choice is: a regret below the seed-to-seed spread is not a mistake
  the data can show;
- `train.warmup` is compared in steps (`warmup_in_steps`), as the runs trained it;
- `replay`: halving's result minus the grid's run at the same value. The winner's decayed run
  follows the same trajectory as its full WSD run, so this is 0 up to float and thread order.

`--strategy curve` checks curve-aware tuning (`sweep.tune_curve`) instead, offline on the
full grid alone (no --tuned): each candidate's curve in --curves (with train_loss) cut where
the strategy stops it, its final loss predicted from that prefix (`analysis.tuning.curve_check`):

    python -m analysis.tuning_check --strategy curve --grid GRID/runs.csv \
        --curves GRID/curves.csv --tune train.lr --tune train.warmup [--runs 2] \
        [--seed-grid OTHER_SEED/runs.csv] [--first-step K] [--out FILE]

--seed-grid: the same grid run with another seed; each arm's one-seed spread is measured from
it (`analysis.tuning.curve_check.seed_sd`) and a choice within it counts as a success.

Exit code 2 with one line on stderr, and nothing written, when the input cannot be compared.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import pandas as pd

from analysis.data.load import InputError, read_csv
from analysis.data.select import ArgumentParser, check_out_file
from analysis.tuning import arms as tuning
from analysis.tuning import curve_check, curve_tuning

# The sweep tags each tuned arm's result `chosen` (halving's decayed winner) and its other
# segments `candidate` (stopped at rungs): together they are the values halving compared. Arms
# that trained a transferred value (`transfer`) are not checked.
TUNED_ROLES = ("candidate", "chosen")
WARMUP_KEY = "train.warmup"
MATCH_RTOL = 0.01  # N and D of the same arm in two sweeps agree to this


def warmup_in_steps(runs: pd.DataFrame) -> pd.DataFrame:
    """`train.warmup` as steps: a fraction (< 1) of the arm's steps ceil(D / batch_tokens), D
    the arm's budget (its largest D: a halving segment stops at its rung), rounded as training
    rounds it; a count (>= 1) as it is. Halving's segments train a fractional warmup as the step
    count of a run to D, and some sweeps record the steps, others the fraction as written:
    compared as steps, the same warmup is the same value."""
    if WARMUP_KEY not in runs.columns or "train.batch_tokens" not in runs.columns:
        return runs
    budget = runs.groupby(tuning.arm_labels(runs))["D"].transform("max")
    steps = [math.ceil(d / bt) for d, bt in zip(budget, runs["train.batch_tokens"])]
    warm = [float(round(w * n)) if w < 1 else float(w) for w, n in zip(runs[WARMUP_KEY], steps)]
    return runs.assign(**{WARMUP_KEY: warm})


def _arms(path: str, keys: list[str], tuned_only: bool) -> list[dict]:
    runs = warmup_in_steps(read_csv(path).frame)
    flag = "--tuned" if tuned_only else "--grid"
    if tuned_only:
        for col in ("tune_role", "arm"):  # halving's segments of an arm share its `arm` tag
            if col not in runs.columns:
                raise InputError(f"--tuned {path}: no column '{col}' (not a tuned sweep's runs)")
        runs = runs[runs["tune_role"].isin(TUNED_ROLES)]
        if runs.empty:
            raise InputError(f"--tuned {path}: no run has tune_role {' or '.join(TUNED_ROLES)}")
    for col in ("N", "D", "loss"):
        if col not in runs.columns:
            raise InputError(f"{flag} {path}: no column '{col}'")
    try:
        return tuning.select(runs, keys)[1]["arms"]
    except InputError as err:
        raise InputError(f"{flag} {path}: {err}") from None


def tried(arm: dict) -> set[str]:
    """The values an arm compared: its full-length runs' and those stopped early."""
    return set(arm["losses"]) | {s["value"] for s in arm["stopped_early"]}


def _same(a: float, b: float) -> bool:
    return abs(a - b) <= MATCH_RTOL * max(abs(a), abs(b))


def _match(arm: dict, grid: list[dict]) -> dict | None:
    found = [
        g
        for g in grid
        if g["variant"] == arm["variant"] and _same(g["N"], arm["N"]) and _same(g["D"], arm["D"])
    ]
    return found[0] if len(found) == 1 else None


def compare(tuned: list[dict], grid: list[dict], keys: list[str]) -> tuple[pd.DataFrame, list[str]]:
    """One row per tuned arm that the grid has; and the tuned arms it lacks (labels)."""
    rows, missing = [], []
    for arm in tuned:
        g = _match(arm, grid)
        label = f"{arm['variant']} N={arm['N']:.6g} D={arm['D']:.6g}"
        if g is None:
            missing.append(label)
            continue
        choice = tuning.combo_text(keys, tuple(arm["best"][k] for k in keys))
        # the grid restricted to what halving compared (a wider grid's extra values left out)
        compared = tried(arm)
        common = {v: loss for v, loss in g["losses"].items() if v in compared}
        if not common:
            missing.append(f"{label} (the grid has none of its values)")
            continue
        if choice not in common:  # e.g. the grid's run at that value failed
            missing.append(f"{label} (the grid has no run at halving's choice {choice})")
            continue
        ordered = sorted(common.items(), key=lambda kv: kv[1])
        best = ordered[0][0]
        grid_at_choice = common[choice]
        rank = 1 + [v for v, _ in ordered].index(choice)
        rows.append(
            {
                "variant": arm["variant"],
                "N": arm["N"],
                "D": arm["D"],
                "halving_choice": choice,
                "grid_choice": best,
                "rank": rank,
                "n_grid": len(ordered),
                "n_left_out": len(g["losses"]) - len(common),
                "grid_best_loss": ordered[0][1],
                "grid_loss_at_choice": grid_at_choice,
                "regret": grid_at_choice - ordered[0][1],
                "margin": ordered[1][1] - ordered[0][1] if len(ordered) > 1 else math.nan,
                "halving_loss": arm["losses"][choice],
                "replay": arm["losses"][choice] - grid_at_choice,
            }
        )
    return pd.DataFrame(rows), missing


def summary(
    table: pd.DataFrame, missing: list[str], keys: list[str], who: str = "Halving"
) -> list[str]:
    """The comparison in words: agreement, regret, and how decisive the grid itself is (`who`:
    the tuning strategy, `strategy_of` the tuned runs)."""
    n = len(table)
    agree = int((table["rank"] == 1).sum())
    low = who.lower()
    out = [f"{who} chose the full grid's value at {agree} of {n} arms."]
    if WARMUP_KEY in keys:
        out[0] += f" ({WARMUP_KEY} in steps, as the runs trained it.)"
    off = table[table["rank"] != 1]
    if len(off):
        worst = off.loc[off["regret"].idxmax()]
        within = int((off["regret"] <= off["margin"].fillna(0) + 1e-12).sum())
        out.append(
            f"Where they differ, {low}'s choice ranks {', '.join(map(str, off['rank'].astype(int)))} "
            f"in the grid and costs {off['regret'].mean():.3f} nats on average (worst "
            f"{worst['regret']:.3f}: {worst['variant']} at N={worst['N']:.3g}, "
            f"{worst['halving_choice']} instead of {worst['grid_choice']}); {within} of these "
            f"{len(off)} regrets {'is' if within == 1 else 'are'} no larger than the gap between "
            "the grid's own best and second best, which one seed per candidate cannot resolve."
        )
    replay = table["replay"].abs().max()
    out.append(
        f"Largest |{low} result - grid run at the same value|: {replay:.2g} nats (the same "
        "trajectory; non-zero only from float and thread order)."
    )
    wider = int(table["n_left_out"].max())
    if wider:
        out.append(
            f"The grid's values that {low} did not try (up to {wider} per arm) are left "
            "out: every rank and regret is among the values both compared."
        )
    if missing:
        out.append(f"Not in the grid, so not checked: {'; '.join(missing)}.")
    return out


def markdown(table: pd.DataFrame, lines: list[str], who: str = "Halving") -> str:
    head = [
        "variant",
        "N",
        "D",
        f"{who.lower()} chose",
        "grid chose",
        "rank",
        "regret",
        "margin",
        "replay",
    ]
    body = [
        f"| {r.variant} | {r.N:.3g} | {r.D:.3g} | {r.halving_choice} | {r.grid_choice} | "
        f"{r.rank}/{r.n_grid} | {r.regret:.3f} | {r.margin:.3f} | {r.replay:.1e} |"
        for r in table.itertuples()
    ]
    grid = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head), *body]
    return "\n".join([f"# {who} against the full grid", "", *lines, "", *grid, ""])


def strategy_of(tuned: list[dict]) -> str:
    """How a tuned sweep chose (its arms from `_arms`): curve-aware tuning's prefixes carry
    their arm's budget (`tuning.curve_prefixes`), halving's segments do not."""
    curve = any(s["curve"] for arm in tuned for s in arm["stopped_early"])
    return "Curve-aware tuning" if curve else "Halving"


def _parser() -> ArgumentParser:
    parser = ArgumentParser(
        prog="python -m analysis.tuning_check",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--strategy", choices=("halving", "curve"), default="halving")
    parser.add_argument("--tuned", help="CSV of the halving sweep's runs (--strategy halving)")
    parser.add_argument("--grid", required=True, help="CSV of the full grid at the same arms")
    parser.add_argument("--curves", help="the grid's curves.csv with train_loss (--strategy curve)")
    parser.add_argument(
        "--runs",
        type=float,
        help="curve: runs' compute per arm (staged: its worst case, default 3; else 2)",
    )
    parser.add_argument(
        "--rule",
        choices=("staged", "tissue", "last"),
        default="staged",
        help="curve: the staged rule (the strategy's default), the one-prefix curve law "
        "(`rule: predicted`), or the prefix's last train loss (a baseline)",
    )
    parser.add_argument(
        "--z", type=float, help="curve, staged: the separation in standard errors (default 2)"
    )
    parser.add_argument(
        "--first-step",
        type=int,
        help="curve: the first step the curve law fits (default: the strategy's, 2)",
    )
    parser.add_argument(
        "--seed-grid", help="curve: the same grid with another seed (measures the seed spread)"
    )
    parser.add_argument("--tune", action="append", required=True, help="a tuned key (repeatable)")
    parser.add_argument("--out", help="also write the comparison as markdown here")
    return parser


def _curve_text(args) -> str:
    if args.tuned:
        raise InputError("--tuned: not used by --strategy curve (it tunes the grid's runs)")
    if not args.curves:
        raise InputError("--curves: required by --strategy curve (the grid's dense curves)")
    if args.runs is None:
        args.runs = curve_tuning.STAGED_RUNS if args.rule == "staged" else curve_tuning.RUNS
    if not args.runs > 1.0:
        raise InputError(f"--runs: expected more than 1 run per arm, got {args.runs}")
    if args.first_step is not None and args.first_step < 1:
        raise InputError(f"--first-step: expected a step >= 1 (S1 > 0), got {args.first_step}")
    paths = (("--grid", args.grid), ("--curves", args.curves), ("--seed-grid", args.seed_grid))
    for flag, path in paths:
        if path and not Path(path).is_file():
            raise InputError(f"{flag}: no such file: {path}")
    runs = read_csv(args.grid).frame
    other = read_csv(args.seed_grid).frame if args.seed_grid else None
    points = pd.read_csv(args.curves)
    if args.z is not None and not (args.rule == "staged" and args.z > 0):
        raise InputError(f"--z: a positive separation for --rule staged, got {args.z}")
    if args.first_step is not None and args.rule == "staged":
        raise InputError("--first-step: the one-prefix rules' setting (--rule tissue or last)")
    table = curve_check.check(
        runs, points, args.tune, args.runs, args.rule, other, first_step=args.first_step, z=args.z
    )
    return curve_check.markdown(table, args.runs, args.rule)


def _halving_text(args) -> str:
    if not args.tuned:
        raise InputError("--tuned: required by --strategy halving (the halving sweep's runs)")
    if args.seed_grid:
        raise InputError("--seed-grid: used by --strategy curve only")
    tuned = _arms(args.tuned, args.tune, tuned_only=True)
    grid = _arms(args.grid, args.tune, tuned_only=False)
    table, missing = compare(tuned, grid, args.tune)
    if table.empty:
        raise InputError(
            f"--grid {args.grid}: none of the {len(tuned)} tuned arms is in it "
            "(arms match on variant x N x D)"
        )
    who = strategy_of(tuned)
    return markdown(table, summary(table, missing, args.tune, who), who)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.out:
            check_out_file(args.out)
        text = _curve_text(args) if args.strategy == "curve" else _halving_text(args)
    except InputError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
