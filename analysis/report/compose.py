"""The report as a loop over its sections (`analysis.report.section`): fit.json, the figures
and the blocks of one analysis.

The blocks: the title and one sentence on the runs; the summary (the answer: the ablation's
verdicts, the baseline's law, then every section's notes); then each section's detail in
reading order, every figure at the end of the section it belongs to.
"""

from __future__ import annotations

from pathlib import Path

from analysis.report.ablation import Ablation
from analysis.report.curves import Curves
from analysis.report.laws import Laws
from analysis.report.leverage import Leverage
from analysis.report.runs import Runs
from analysis.report.section import SUMMARY, Context, place
from analysis.report.tuning import Tuning

RUNS, TUNING, LAWS, ABLATION, CURVES = Runs(), Tuning(), Laws(), Ablation(), Curves()
LEVERAGE = Leverage()  # only with MoE variants
SECTIONS = (RUNS, TUNING, LAWS, ABLATION, LEVERAGE, CURVES)  # the details, in reading order
HEADLINE = (ABLATION, LEVERAGE, LAWS, TUNING, RUNS)  # the summary: the answer first, then the notes
FIT_JSON = (
    LAWS,
    TUNING,
    ABLATION,
    LEVERAGE,
)  # fit.json's order: the laws, the tuning, the verdicts
DRAWN = (LAWS, CURVES, TUNING, ABLATION)  # the order figures are drawn in


def fit_json(an) -> dict:
    """fit.json of one analysis: every section's entries."""
    out: dict = {}
    for section in FIT_JSON:
        out.update(section.fit_json(an))
    if an.labels:  # every variant above is named by its label; its value of --compare here
        out["labels"] = dict(sorted(an.labels.items()))
    return out


def make_figures(an, ctx: Context) -> list[tuple[str, str, str]]:
    """Draw and save every section's figures to ctx.fig_dir: [(stem, caption, heading)]."""
    from analysis.report import plots  # lazy: seaborn ~3 s

    plots.setup()
    out = []
    for section in DRAWN:
        for fig in section.figures(an, ctx):
            plots.save(fig.draw(plots), ctx.fig_dir, fig.stem)
            out.append((fig.stem, fig.caption, fig.heading))
    return out


def build_blocks(an, figures, title: str, ctx: Context) -> list[tuple]:
    """The report's blocks, `figures` [(stem, caption, heading)] placed (`make_figures`)."""
    figs = {stem: caption for stem, caption, _ in figures}
    b = intro_blocks(an, ctx.excluded, title)
    b.append(("h2", SUMMARY))
    for section in HEADLINE:
        b.extend(section.summary(an, figs))  # a section may take its figure into the summary
    notes = [s for section in HEADLINE for s in section.sentences(an)]
    if notes:
        b.append(("list", notes))
    for section in SECTIONS:
        b.extend(section.blocks(an, ctx))
    for stem, _, heading in figures:
        if stem in figs:
            place(b, heading, ("fig", stem, figs[stem]))
    return b


def intro_blocks(an, excluded, title: str) -> list[tuple]:
    """The title and one sentence on which runs went into the report."""
    runs, result, ablation, tuned = an.runs, an.result, an.ablation, an.tuned
    b: list[tuple] = [("h1", f"Scaling-law report: {title}")]
    n_boot = result["parametric"]["n_boot"] if result else (ablation or {}).get("n_boot", "")
    fitted = f" ({result['n_runs']} in the baseline fits)" if result else ""
    if tuned:
        fitted += (
            f", the best of {tuned['n_runs']} runs of a tuning grid over "
            f"{', '.join(tuned['keys'])} in each of {tuned['n_arms']} arms"
        )
    b.append(
        (
            "p",
            f"{len(runs)} finished runs{fitted}; {len(excluded)} excluded. Every estimate "
            f"carries a 95% bootstrap percentile interval over runs"
            f"{f' ({n_boot} replicates)' if n_boot else ''}.",
        )
    )
    return b


def report_blocks(an, excluded, fig_dir: Path, title: str, source: str, compute: str):
    """The figures (written to `fig_dir`) and the blocks of one analysis."""
    ctx = Context(fig_dir=fig_dir, compute=compute, excluded=excluded, source=source)
    return build_blocks(an, make_figures(an, ctx), title, ctx)
