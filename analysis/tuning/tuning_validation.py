"""Curve-aware tuning validated out of sample: leave-one-grid-out over dense full grids.

    python -m analysis.tuning_validation --tune train.lr --tune train.warmup \
        --grid demo=results/demo/curve_grid,results/demo/curve_grid_seed1,results/demo/curve_grid_seed2 \
        --grid gpt2=results/tuning_validation/tv_gpt2,results/tuning_validation/tv_gpt2_seed1 \
        [--z 1 2 3] [--slope-runs results/demo/runs.csv] [--out FILE]

A `--grid NAME=FOLDER[,FOLDER...]` is one family of dense full grids (runs.csv and curves.csv
with the train loss at every step, e.g. conf/sweep/tv_gpt2.yaml), its folders the same grid
at other seeds: every arm of every folder is a test case, and each arm's seed spread is
measured against its family's other seeds (`analysis.tuning.curve_check.seed_sd`). The staged rule's
one setting, its separation z, is chosen on the other families (the lowest mean regret over
their arms, ties to the larger z) and scored on the held-out one; the one-prefix rules
(`predicted`, the prefix's `last` losses) have no setting and are scored as they are.

Per held-out family and rule: arms, successes (regret within the arm's seed spread), mean and
worst regret in nats, the mean regret as compute (the best candidate reaches the chosen
one's loss with 2^(-regret / s) of the compute, s the shallowest loss drop per doubling of
tokens that --slope-runs measures at the grids' budget), runs' compute per arm, and picks in
the bottom half of a grid. Predictions are memoized per (run, rung): every z replays the same
fits.

Exit code 2 with one line on stderr, and nothing written, when the input cannot be compared.
"""

from __future__ import annotations

import argparse
import math
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd

from analysis.data.load import InputError, read_csv
from analysis.data.select import ArgumentParser, check_out_file
from analysis.tuning import curve_check, curve_tuning

Z_GRID = (1.0, 2.0, 3.0)
RULES = ("staged", "tissue", "last")  # tissue: the sweep's `rule: predicted`


class _Memo:
    """`curve_tuning.predict`, remembered per (run, tokens seen): z only moves the decisions."""

    def __init__(self):
        self.seen: dict = {}

    def __call__(self, row, tokens, loss, upto):
        key = (row["run_id"], int(upto))
        if key not in self.seen:
            self.seen[key] = curve_tuning.predict(row, tokens, loss, upto)
        return self.seen[key]


def _read(folder: str, flag: str):
    for name in ("runs.csv", "curves.csv"):
        if not (Path(folder) / name).is_file():
            raise InputError(f"{flag}: no {name} in {folder}")
    return read_csv(str(Path(folder) / "runs.csv")).frame, pd.read_csv(Path(folder) / "curves.csv")


def parse_grids(specs: list[str]) -> dict[str, list[str]]:
    """{family: [folders]} from NAME=FOLDER[,FOLDER...]; two families are needed to hold one out."""
    out: dict[str, list[str]] = {}
    for spec in specs:
        name, sep, folders = spec.partition("=")
        if not sep or not name or not folders:
            raise InputError(f"--grid: expected NAME=FOLDER[,FOLDER...], got {spec!r}")
        if name in out:
            raise InputError(f"--grid: family {name!r} given twice")
        out[name] = [f for f in folders.split(",") if f]
    if len(out) < 2:
        raise InputError("--grid: at least two families (one is held out, the others choose z)")
    return out


def _folder_tables(job) -> dict:
    """Every rule's table at one folder of a family (a process of its own: its memo serves
    every z), each arm with its seed spread against the family's other folders."""
    family, i, folders, keys, runs_allowed, z_grid = job
    runs, points = folders[i]
    others = [r for j, (r, _) in enumerate(folders) if j != i]
    sds = [curve_check.check_sd(runs, o, keys) for o in others]
    sd = np.nanmean(np.vstack(sds), axis=0) if sds else math.nan
    memo, out = _Memo(), {}
    settings = [("staged", z) for z in z_grid] + [("tissue", None), ("last", None)]
    for rule, z in settings:
        kw = {"z": z} if rule == "staged" else {}
        allowed = runs_allowed if rule == "staged" else curve_tuning.RUNS
        table = curve_check.check(runs, points, keys, allowed, rule, predict=memo, **kw)
        out[(rule, z)] = table.assign(seed_sd=sd, family=family, seed_folder=i)
    return out


def replay_all(families, keys, runs_allowed, z_grid, jobs: int = 1) -> dict:
    """{(rule, z): every arm of every family's folders}, folders in `jobs` processes."""
    work = [
        (family, i, folders, keys, runs_allowed, tuple(z_grid))
        for family, folders in families.items()
        for i in range(len(folders))
    ]
    if jobs > 1:
        with ProcessPoolExecutor(jobs) as pool:
            parts = list(pool.map(_folder_tables, work))
    else:
        parts = [_folder_tables(w) for w in work]
    return {k: pd.concat([p[k] for p in parts], ignore_index=True) for k in parts[0]}


def score(table: pd.DataFrame, per_doubling: float) -> dict:
    regret = table["regret"].to_numpy(float)
    ok = regret <= table["seed_sd"].to_numpy(float) + 1e-12
    mean = float(np.nanmean(regret))
    return {
        "arms": len(table),
        "within seed sd": int(ok.sum()),
        "mean regret": mean,
        "worst regret": float(np.nanmax(regret)),
        "mean seed sd": float(np.nanmean(table["seed_sd"])),
        "compute lost": 1.0 - 2.0 ** (-mean / per_doubling) if per_doubling > 0 else math.nan,
        "runs per arm": float(table["cost_runs"].mean()),
        "bottom half": int((table["rank"] > table["n_grid"] / 2).sum()),
    }


def shallowest_slope(runs: pd.DataFrame, budget: float) -> float:
    """The smallest loss drop per doubling of tokens from `budget` to the next budget, over
    the variant x size cells of a sweep's runs (seed 0, each cell's best run): the slope that
    turns a regret into the most compute."""
    if "seed" in runs.columns:
        runs = runs[runs["seed"].fillna(0) == 0]
    best = runs.groupby(["variant", "N", "D"])["loss"].min().reset_index()
    slopes = []
    for _, g in best.groupby(["variant", "N"]):
        g = g.sort_values("D")
        at = np.flatnonzero(np.isclose(g["D"], budget, rtol=0.1))
        if at.size and at[0] + 1 < len(g):
            a, b = g.iloc[at[0]], g.iloc[at[0] + 1]
            slopes.append((a["loss"] - b["loss"]) / math.log2(b["D"] / a["D"]))
    if not slopes:
        raise InputError(
            f"--slope-runs: no variant x size with a budget near {budget:g} and a next one"
        )
    return float(min(slopes))


def validate(families, keys, runs_allowed, z_grid, per_doubling, jobs: int = 1):
    """(held-out table: one row per family x rule, the z each held-out family got, the
    staged rule's tables by z)."""
    tables = replay_all(families, keys, runs_allowed, z_grid, jobs)
    by_z = {z: tables[("staged", z)] for z in z_grid}
    rows, chosen = [], {}
    for held in families:
        train = {z: t[t["family"] != held] for z, t in by_z.items()}
        # the lowest mean regret on the other families; ties to the larger (more careful) z
        z = min(z_grid, key=lambda z: (round(train[z]["regret"].mean(), 6), -z))
        chosen[held] = z
        test = by_z[z][by_z[z]["family"] == held]
        rows.append({"held out": held, "rule": f"staged (z={z:g})", **score(test, per_doubling)})
    for rule, name in (("tissue", "predicted (one prefix)"), ("last", "last loss (baseline)")):
        table = tables[(rule, None)]
        for held in families:
            part = table[table["family"] == held]
            rows.append({"held out": held, "rule": name, **score(part, per_doubling)})
    return pd.DataFrame(rows), chosen, by_z


def markdown(table: pd.DataFrame, chosen: dict, by_z: dict, per_doubling: float, cmd: str) -> str:
    staged = table[table["rule"].str.startswith("staged")]
    mean = float(np.average(staged["mean regret"], weights=staged["arms"]))
    sd = float(np.average(staged["mean seed sd"], weights=staged["arms"]))
    lines = [
        "# Curve-aware tuning, held out",
        "",
        f"    {cmd}",
        "",
        f"Each family held out in turn, the staged rule's z chosen on the others: over "
        f"{int(staged['arms'].sum())} held-out arms it chose a value within the arm's seed spread "
        f"at {int(staged['within seed sd'].sum())}, mean regret {mean:.3f} nats (mean seed sd "
        f"{sd:.3f}), worst {staged['worst regret'].max():.3f}, "
        f"{np.average(staged['runs per arm'], weights=staged['arms']):.2f} runs' compute per arm, "
        f"{int(staged['bottom half'].sum())} pick(s) in the bottom half of a grid.",
        f"Compute lost: the best candidate reaches the chosen one's loss with 2^(-regret / s) of "
        f"the compute, s = {per_doubling:.3f} nats per doubling (the shallowest slope "
        "--slope-runs measures at this budget).",
        "",
    ]
    head = list(table.columns)
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in table.itertuples(index=False):
        cells = [f"{v:.3f}" if isinstance(v, float) else str(v) for v in r]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "## Every arm, held out (the staged rule at its family's z)", ""]
    cols = ["family", "seed_folder", "variant", "N", "D", "choice", "grid_choice", "rank"]
    cols += ["regret", "seed_sd", "cost_runs", "decided_at", "why"]
    lines += ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for family, z in chosen.items():
        part = by_z[z][by_z[z]["family"] == family]
        for r in part[cols].itertuples(index=False):
            cells = [f"{v:.3g}" if isinstance(v, float) else str(v) for v in r]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _parser() -> ArgumentParser:
    parser = ArgumentParser(
        prog="python -m analysis.tuning_validation",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--grid", action="append", required=True, help="NAME=FOLDER[,FOLDER...]")
    parser.add_argument("--tune", action="append", required=True, help="a tuned key (repeatable)")
    parser.add_argument("--runs", type=float, default=curve_tuning.STAGED_RUNS)
    parser.add_argument("--z", type=float, nargs="+", default=list(Z_GRID))
    parser.add_argument("--slope-runs", help="a sweep's runs.csv with budgets past the grids'")
    parser.add_argument("--jobs", type=int, default=1, help="folders replayed in parallel")
    parser.add_argument("--out", help="also write the table as markdown here")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.out:
            check_out_file(args.out)
        if any(not z > 0 for z in args.z):
            raise InputError(f"--z: separations must be positive, got {args.z}")
        if not args.runs > 1.0:
            raise InputError(f"--runs: expected more than 1 run per arm, got {args.runs}")
        specs = parse_grids(args.grid)
        families = {name: [_read(f, "--grid") for f in folders] for name, folders in specs.items()}
        budget = min(float(r["D"].max()) for fam in families.values() for r, _ in fam)
        per_doubling = math.nan
        if args.slope_runs:
            if not Path(args.slope_runs).is_file():
                raise InputError(f"--slope-runs: no such file: {args.slope_runs}")
            per_doubling = shallowest_slope(read_csv(args.slope_runs).frame, budget)
        if args.jobs < 1:
            raise InputError(f"--jobs: expected 1 or more, got {args.jobs}")
        table, chosen, by_z = validate(
            families, args.tune, args.runs, args.z, per_doubling, args.jobs
        )
    except InputError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    cmd = "python -m analysis.tuning_validation " + " ".join(argv or sys.argv[1:])
    text = markdown(table, chosen, by_z, per_doubling, cmd)
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
