"""Porian et al. 2024 step by step: the exponent a of N_opt ~ C^a at each correction.

    python -m benchmarks.porian --csv runs.csv [--csv more.csv] [--out table.md] [--figures DIR]
    python -m benchmarks.porian --experiment porian --tracking-uri URI --runs-csv runs.csv ...

Porian, Wortsman, Jitsev, Schmidt, Carmon, "Resolving Discrepancies in Compute-Optimal Scaling
of Language Models" (arXiv 2406.19146) move a from Kaplan's value towards Chinchilla's by
correcting one setting at a time. The runs carry a `step` column (else their `sweep`, one of
conf/sweep/porian_*.yaml, names it); each step's runs are an IsoFLOP ladder, and a is approach
2's (`analysis.fits.isoflop`: the parabola minimum per budget, a power law through them, a
bootstrap over the budgets with the runs' seed noise for its interval). From step `head` on, N
counts the last layer (N + vocab_size x d_model, from the `model.*` columns) and C is the runs'
exact training FLOPs (`C_exact`, as those sweeps plan their budgets); step `kaplan` counts
non-embedding N and C = 6 N D. The published column is Porian's RefinedWeb value for each step
(results/porian/README.md says where they come from); a here comes from far smaller models
(results/porian: 2.9K-51K non-embedding parameters) and budgets. `--runs-csv` writes the runs
read, with their `step`, so the table regenerates without the MLflow store.

A one-off study (results/porian), not part of the analysis library.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from analysis.data.load import InputError
from analysis.data.select import (
    ArgumentParser,
    add_selection_args,
    check_out_dir,
    check_out_file,
    load_selected,
)
from analysis.fits.estimate import fmt, interval
from analysis.fits.isoflop import isoflop_report

# (step, what it changes, Porian et al.'s a on RefinedWeb, counts the last layer)
STEPS = (
    (
        "kaplan",
        "Kaplan-style: N without the head, C = 6ND, long fixed warmup, no matched decay",
        0.835,
        False,
    ),
    ("head", "+ the last layer counted in N and C", 0.706, True),
    ("warmup", "+ warmup short relative to each run", 0.602, True),
    ("decay", "+ cosine decay matched to each budget", 0.571, True),
    ("tuned", "+ per-size lr (2 values), AdamW beta2 0.999", 0.497, True),
)
SWEEPS = {f"porian_{i}_{name}": name for i, (name, *_) in enumerate(STEPS, 1)}


def steps_of(runs: pd.DataFrame, column: str = "step") -> pd.Series:
    """Each run's step: its `column`, else the step its sweep's name stands for."""
    if column in runs.columns:
        steps = runs[column].astype(str)
    elif "sweep" in runs.columns:
        steps = runs["sweep"].astype(str).map(SWEEPS)
    else:
        raise InputError(f"no '{column}' column and no 'sweep' column to name each run's step")
    known = {name for name, *_ in STEPS}
    unknown = sorted(set(steps.dropna()) - known)
    if unknown or steps.isna().any():
        raise InputError(
            f"column '{column}': unknown step(s) {unknown or ['(empty)']}; steps: {sorted(known)}"
        )
    return steps


def as_counted(runs: pd.DataFrame, counts_head: bool) -> pd.DataFrame:
    """N and C as the step counts them: with the head, N + vocab_size x d_model and C_exact."""
    if not counts_head:
        return runs
    need = ["model.vocab_size", "model.d_model", "C_exact"]
    missing = [c for c in need if c not in runs.columns]
    if missing:
        raise InputError(f"counting the last layer needs column(s) {missing}")
    head = runs["model.vocab_size"].astype(float) * runs["model.d_model"].astype(float)
    return runs.assign(N=runs["N"] + head, C=runs["C_exact"].astype(float))


def step_fits(runs: pd.DataFrame, n_boot: int = 1000, seed: int = 0, column: str = "step"):
    """Per step present, in the paper's order: (step, its runs as the step counts N and C,
    approach 2's section). Tuning candidates (`tune_role`) are left out."""
    if "tune_role" in runs.columns:  # a tuned step: each arm's result, not its candidates
        runs = runs[~runs["tune_role"].isin(["candidate"])].reset_index(drop=True)
    steps = steps_of(runs, column)
    fits = []
    for name, _, _, counts_head in STEPS:
        mine = runs[steps == name].reset_index(drop=True)
        if not mine.empty:
            counted = as_counted(mine, counts_head)
            fits.append((name, counted, isoflop_report(counted, n_boot, seed) or {}))
    return fits


def exponent_table(runs: pd.DataFrame, n_boot: int = 1000, seed: int = 0, column: str = "step"):
    """One row per step present: a with its 95% interval (or why it is not identified), the
    budgets used, the runs, Porian's value."""
    about = {name: (what, published) for name, what, published, _ in STEPS}
    return [
        _row(name, *about[name], len(counted), section)
        for name, counted, section in step_fits(runs, n_boot, seed, column)
    ]


def draw(fits, out_dir: Path) -> list[Path]:
    """One IsoFLOP figure per step (loss against N as the step counts it, the parabolas and
    minima approach 2 used), `isoflop_<step>.png` in `out_dir`."""
    from analysis.report import plots  # lazy: matplotlib and seaborn ~3 s; a --help needs none

    plots.setup()
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, counted, section in fits:
        if "per_budget" not in section:  # no IsoFLOP profile to draw
            continue
        fig = plots.isoflop_curves(counted, section)
        ax = fig.axes[0]
        head = "non-embedding parameters" if name == "kaplan" else "non-embedding + head"
        ax.set_xlabel(f"N ({head})")
        ax.set_title(f"step {name}: a = {fmt(section.get('a'), '.3f')}", fontsize=9)
        plots.readable_ticks(fig)
        path = out_dir / f"isoflop_{name}.png"
        fig.savefig(path, metadata=plots.PNG_META, bbox_inches="tight")
        plots.plt.close(fig)
        paths.append(path)
    return paths


def _row(name: str, what: str, published: float, n_runs: int, section: dict) -> dict:
    why = section.get("skipped") or section.get("why_not_identified", {}).get("a")
    if "a" not in section and not why:
        why = "no IsoFLOP profiles among these runs"
    return {
        "step": name,
        "what": what,
        "n_runs": n_runs,
        "n_budgets": section.get("n_budgets", 0),
        "a": None if why else section["a"],
        "ci95": None if why else section["ci95"].get("a"),
        "why_not_identified": why,
        "porian_refinedweb": published,
    }


def render(rows: list[dict]) -> str:
    """The table as markdown, one line under it on what it is."""
    lines = [
        "| step | what changes | runs | budgets used | a here [95% CI] | Porian et al. (RefinedWeb) |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        a = (
            f"not identified ({r['why_not_identified']})"
            if r["a"] is None
            else (f"{fmt(r['a'], '.3f')} {interval(r['ci95'], '.3f')}")
        )
        lines.append(
            f"| {r['step']} | {r['what']} | {r['n_runs']} | {r['n_budgets']} | {a} | "
            f"{r['porian_refinedweb']:.3f} |"
        )
    lines.append("")
    lines.append(
        "a: exponent of N_opt ~ C^a from IsoFLOP minima (approach 2), bootstrap over budgets "
        "with the runs' seed noise added to every loss. "
        "Porian et al.'s values come from models of 5M-901M parameters; compare the direction "
        "of each step, not the level."
    )
    return "\n".join(lines) + "\n"


def _parser() -> ArgumentParser:
    parser = ArgumentParser(
        prog="python -m benchmarks.porian",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_selection_args(parser)
    parser.add_argument("--step-column", default="step", help="column naming each run's step")
    parser.add_argument("--bootstrap", type=int, default=1000, help="replicates (default 1000)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", help="also write the table to this markdown file")
    parser.add_argument("--figures", help="folder for one IsoFLOP figure per step (PNG)")
    parser.add_argument("--runs-csv", help="write the runs read, with their step, to this CSV")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        for flag, path in (("--out", args.out), ("--runs-csv", args.runs_csv)):
            if path:
                check_out_file(path, flag)
        if args.figures:
            check_out_dir(args.figures, "--figures")
        runs = load_selected(args).frame
        runs = runs.assign(**{args.step_column: steps_of(runs, args.step_column)})
        fits = step_fits(runs, args.bootstrap, args.seed, args.step_column)
    except InputError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    about = {name: (what, published) for name, what, published, _ in STEPS}
    text = render([_row(n, *about[n], len(c), section) for n, c, section in fits])
    print(text, end="")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text)
    if args.runs_csv:
        Path(args.runs_csv).parent.mkdir(parents=True, exist_ok=True)
        runs.to_csv(args.runs_csv, index=False)
    if args.figures:
        draw(fits, Path(args.figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
