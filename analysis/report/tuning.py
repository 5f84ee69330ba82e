"""The report's tuning sections: every arm's grid and choice with the baseline's lr rule
(`analysis.tuning.tuning_report`), and the laws of the optimal lr and batch size
(`analysis.tuning.hparam_report`); their summary notes and figures. Nothing for an untuned sweep.
"""

from __future__ import annotations

from analysis.fits.fit import hparam_entries
from analysis.report.section import Context, Figure, Quiet
from analysis.tuning import arms as tuning
from analysis.tuning import hparam_report, tuning_report


class Tuning(Quiet):
    """fit.json's `tuning` (every arm), `lr_rule` and `hparam_laws` (`batch_rule`)."""

    def fit_json(self, an) -> dict:
        if not an.tuned:
            return {}
        return {"tuning": an.tuned, "lr_rule": an.rule, **hparam_entries(an.hparams)}

    def sentences(self, an) -> list[str]:
        if not an.tuned:
            return []
        return tuning_report.summary_sentences(an.tuned, an.rule) + (
            hparam_report.summary_sentences(an.hparams)
        )

    def blocks(self, an, ctx: Context) -> list[tuple]:
        if not an.tuned:
            return []
        return tuning_report.blocks(an.tuned, an.rule) + hparam_report.blocks(an.hparams)

    def figures(self, an, ctx: Context) -> list[Figure]:
        """Loss against the first tuned key (the lr where tuned) over every run of the grid;
        the loss surfaces of the lr and batch-size cells."""
        if not an.tuned:
            return []
        tuned, grid = an.tuned, an.grid_runs
        key = tuning.lr_key(tuned["keys"]) or tuned["keys"][0]
        out = [
            Figure(
                "tuning",
                tuning_report.figure_caption(key),
                tuning_report.HEADING,
                lambda plots: plots.loss_vs_hyperparameter(
                    tuning.curve_points(grid, tuned, key), key
                ),
            )
        ]
        from analysis.tuning import hparam_plot  # lazy: seaborn ~3 s

        if an.hparams and hparam_plot.surface_cells(an.hparams):
            out.append(
                Figure(
                    "hparam_surface",
                    hparam_report.figure_caption(an.hparams["tolerance"]),
                    hparam_report.HEADING,
                    lambda plots: hparam_plot.loss_surfaces(an.hparams),
                )
            )
        return out
