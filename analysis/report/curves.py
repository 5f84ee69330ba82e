"""The report's curve sections: the training curves of every run (a figure), then the loss-curve
law and curve-aware tuning where the runs hold a full grid (`analysis.tuning.curve_report`)."""

from __future__ import annotations

from analysis.data.load import val_points
from analysis.report.section import Context, Figure, Quiet
from analysis.tuning.curve_report import blocks as curve_blocks

HEADING = "Training curves"


def _points(an):
    points = val_points(an.curves)
    return None if points is None or points.empty else points


class Curves(Quiet):
    def blocks(self, an, ctx: Context) -> list[tuple]:
        b = [("h2", HEADING)] if _points(an) is not None else []
        keys = an.tuned["keys"] if an.tuned else ()
        return b + curve_blocks(an.grid_runs, an.curves, ctx.fig_dir, keys)

    def figures(self, an, ctx: Context) -> list[Figure]:
        """Per variant when there are several, else one line per run."""
        curves, runs, all_runs = _points(an), an.base, an.runs
        if curves is None:
            return []
        if all_runs is not None and all_runs["variant"].nunique() > 1:
            return [
                Figure(
                    "training_curves",
                    "Validation loss against tokens seen per variant, one panel per size (its "
                    "longest token budget), mean over seeds with the range of seeds as a band: "
                    "where the variants part and whether the gap exceeds the seed spread.",
                    HEADING,
                    lambda plots: plots.training_curves_by_variant(curves, all_runs),
                )
            ]
        return [
            Figure(
                "training_curves",
                "Validation loss against tokens seen, one line per run: plateaus and spikes "
                "here explain odd final losses.",
                HEADING,
                lambda plots: plots.training_curves(curves, runs),
            )
        ]
