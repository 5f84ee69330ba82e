"""Scaling-law report: figures, report.md, a self-contained report.html, fit.json and runs.csv.

    python -m analysis.report --experiment NAME [--sweep ID] [--tracking-uri URI] --out results/NAME/
    python -m analysis.report --csv results/NAME/runs.csv [--curves results/NAME/curves.csv] --out DIR

--experiment, --sweep, --csv and --curves are repeatable: the runs of every source go into one
report (IsoFLOP budgets are grouped within each sweep; approach 3 uses every run). A selection
of several model families is refused; `--group family` reports them side by side instead, a
section per family and a comparison of their compute-optimal allocations only
(`analysis.report.families`).
runs.csv (and curves.csv) are exported so the report regenerates without the MLflow database.
Re-running on the same runs rewrites byte-identical files. Bad input: exit 2, nothing written.
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from pathlib import Path

import pandas as pd

from analysis.data import compute_factor
from analysis.data.families import check_one_family, ordered, with_family
from analysis.data.load import InputError, Runs
from analysis.data.select import ArgumentParser, add_selection_args, check_out_dir, load_selected
from analysis.fits.cli import add_fit_args, check_fit_args
from analysis.fits.fit import default_budgets, dumps
from analysis.fits.summary import summary
from analysis.report import families
from analysis.report.analyse import (
    Analysis,
    analyse,
    apply_labels,
    fill_defaults,
    label_variants,
    parse_labels,
    read_curves,
    unlabel,
)
from analysis.report.compose import fit_json, report_blocks
from analysis.report.render import render_html, render_md
from analysis.verdicts import decision
from analysis.verdicts import summary as headline


def _parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(prog="python -m analysis.report", description=__doc__)
    add_selection_args(parser)
    add_fit_args(parser)
    parser.add_argument(
        "--curves",
        action="append",
        help="curves.csv (run_id, tokens, val_loss[, train_loss, lr]) for --csv input; repeatable",
    )
    parser.add_argument(
        "--intermediate",
        action="store_true",
        help="approach 1 also uses intermediate evaluations (constant-LR runs only)",
    )
    parser.add_argument(
        "--compare",
        default="variant",
        help="column whose values are compared, one scaling law each: variant "
        "(ablation sweeps) or arch (a grid over presets)",
    )
    parser.add_argument(
        "--baseline",
        help="baseline value of --compare, or its --label name (default: base; else the only "
        "value, or the llama block's architecture when it is one of them)",
    )
    parser.add_argument(
        "--label",
        action="append",
        metavar="VALUE=NAME",
        help="show the --compare value VALUE as NAME in every table, sentence and figure "
        "(repeatable; e.g. --label post-layernorm-sinusoidal-mha-gelu=vanilla, as a sweep "
        "names its blocks). runs.csv keeps VALUE; fit.json names the variant NAME and maps "
        "each VALUE to its NAME under `labels`",
    )
    parser.add_argument(
        "--group",
        choices=("family",),
        help="one report over several model families: a section per family "
        "(its own law and figures) and a table comparing only their "
        "compute-optimal allocations (losses of different objectives "
        "are not comparable)",
    )
    parser.add_argument(
        "--title", help="report title (default: experiment name(s) or CSV folder name(s))"
    )
    parser.add_argument("--out", required=True, help="output folder")
    parser.add_argument(
        "--export-only",
        action="store_true",
        help="write runs.csv and curves.csv and nothing else (no fit: e.g. a dense full grid "
        "for analysis.tuning_check or analysis.tuning_validation)",
    )
    decision.add_args(parser)
    return parser


def write_report(out: Path, blocks: list[tuple], title: str, content: dict) -> None:
    """report.md, report.html (figures inlined from out/figures) and fit.json."""
    (out / "report.md").write_text(render_md(blocks))
    (out / "report.html").write_text(render_html(blocks, out / "figures", title))
    (out / "fit.json").write_text(dumps(content))


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        args.labels = parse_labels(args.label)
        check_fit_args(args)
        check_out_dir(args.out)
        loaded = load_selected(args)
        for note in fill_defaults(args, loaded.frame):
            print(f"note: {note}")
        apply_labels(args, loaded.frame)
        if args.export_only:
            return export_only(args, loaded.frame)
        if args.group == "family":
            return families_main(args, loaded)
        check_one_family(
            loaded.frame,
            "the selection",
            "report one family at a time, or one section per family: --group family",
        )
        an = analyse(loaded.frame, args)
    except InputError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    title = args.title or default_title(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    an.exported.to_csv(out / "runs.csv", index=False)
    if an.curves is not None and not an.curves.empty:
        an.curves.to_csv(out / "curves.csv", index=False)
    blocks = report_blocks(an, loaded.excluded, out / "figures", title, loaded.source, args.compute)
    write_report(out, blocks, title, fit_json(an))
    if an.result is not None:
        print(summary(an.result, title))
    else:
        print(f"== {title}: {len(an.runs)} runs, one token budget per baseline size: ablation only")
    for line in headline.answer_lines(an.ablation):
        print(textwrap.fill(line, width=80, subsequent_indent="  "))
    print(f"wrote {out}/report.md, report.html, fit.json, runs.csv, figures/")
    return 0


def families_main(args, loaded: Runs) -> int:
    """The families report (--group family, `analysis.report.families`); InputError before
    anything is written."""
    analyses, budgets = _family_analyses(args, with_family(loaded.frame))
    title = args.title or default_title(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    _write_family_tables(out, analyses)
    blocks = _families_blocks(args, loaded, analyses, budgets, title, out)
    by_family = {
        "group_by": "family",
        "budgets": budgets,
        "comparison": families.comparison(analyses),
        "groups": {f: fit_json(an) for f, an in analyses.items()},
    }
    write_report(out, blocks, title, by_family)
    for f, an in analyses.items():
        if an.result is not None:
            print(summary(an.result, f"family={f}"))
    print(
        f"wrote {out}/report.md, report.html, fit.json, runs.csv, figures/ ({len(analyses)} families)"
    )
    return 0


def _family_analyses(args, frame: pd.DataFrame) -> tuple[dict[str, Analysis], list]:
    """One analysis per family, all at the same compute budgets; InputError before any fit."""
    present = ordered(frame["family"])
    frames = {f: frame[frame["family"] == f] for f in present}
    for f, g in frames.items():  # one k per family, before any fitting
        compute_factor.of_runs(g, f"family {f}")
    top = frame.assign(C=frame["C_exact"]) if args.compute == "exact" else frame
    budgets = args.budget or default_budgets(top)  # the same budgets C for every family

    def curves_of(runs: pd.DataFrame) -> pd.DataFrame | None:
        curves = read_curves(args, runs)
        return None if curves is None else curves[curves["run_id"].isin(runs["run_id"])]

    return {f: analyse(g, args, budgets, curves_of) for f, g in frames.items()}, budgets


def _write_family_tables(out: Path, analyses: dict[str, Analysis]) -> None:
    """runs.csv of every family, and curves.csv when any family has training curves."""
    pd.concat([an.exported for an in analyses.values()]).to_csv(out / "runs.csv", index=False)
    curves = [
        an.curves for an in analyses.values() if an.curves is not None and not an.curves.empty
    ]
    if curves:
        pd.concat(curves).to_csv(out / "curves.csv", index=False)


def _families_blocks(args, loaded: Runs, analyses, budgets, title, out: Path) -> list[tuple]:
    """The report: runs per family, the comparison, excluded runs, one section per family
    (writing each family's figures)."""
    n_runs = sum(len(an.exported) for an in analyses.values())
    blocks: list[tuple] = [("h1", f"Scaling-law report by model family: {title}")]
    blocks.append(
        (
            "p",
            f"{n_runs} finished runs of {len(analyses)} families "
            f"({', '.join(f'{f} {len(an.exported)}' for f, an in analyses.items())}); "
            f"{len(loaded.excluded)} excluded. Every estimate carries a 95% bootstrap "
            f"percentile interval over runs ({args.bootstrap} replicates).",
        )
    )
    blocks += families.comparison_blocks(analyses, budgets, bool(args.budget))
    if len(loaded.excluded):
        blocks.append(("h2", "Excluded runs"))
        blocks.append(
            ("table", ["excluded run", "status", "reason"], loaded.excluded.values.tolist())
        )
    for f, an in analyses.items():
        section = report_blocks(
            an,
            loaded.excluded.iloc[0:0],
            out / "figures" / families.folder(f),
            f"{title}, {f}",
            loaded.source,
            args.compute,
        )
        blocks += families.family_blocks(f, section)
    return blocks


def default_title(args) -> str:
    names = args.experiment or [Path(c).parent.name or Path(c).stem for c in args.csv]
    return " + ".join(names)


def export_only(args, frame: pd.DataFrame) -> int:
    """--export-only: the selection's runs (variants labelled) and their curves, no fit."""
    runs = label_variants(frame, args.compare, args.baseline or "base", args.labels)
    runs = unlabel(runs, args.labels)  # runs.csv keeps the values (a labelled baseline's too)
    curves = read_curves(args, runs)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    runs.to_csv(out / "runs.csv", index=False)
    wrote = "runs.csv"
    if curves is not None and not curves.empty:
        curves.to_csv(out / "curves.csv", index=False)
        wrote += ", curves.csv"
    print(f"wrote {out}/{wrote} ({len(runs)} runs; --export-only: no fit, no report)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
