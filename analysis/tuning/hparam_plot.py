"""The (lr, batch size) loss surface of every tuned cell, from fit.json's `hparam_laws`
(`analysis.tuning.hparam_laws`): drawn with matplotlib, saved by `analysis.report.plots.save`."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402

from analysis.report.plots import tick_text  # noqa: E402

MAX_PANELS = 12  # a report figure stays readable; the table lists every cell


def surface_cells(hparams: dict) -> list[dict]:
    """The cells with 2+ values of both lr and batch: the ones with a surface to draw."""
    return [
        c
        for c in hparams["cells"]
        if len(c["grid"].get("lr", [])) >= 2 and len(c["grid"].get("batch", [])) >= 2
    ]


def _index(grid: list[float], value: float) -> float:
    """A value's position on a panel whose cells are the grid values (linear in log)."""
    return float(np.interp(np.log(value), np.log(grid), np.arange(len(grid))))


def _panel(ax, c: dict) -> object:
    lrs, batches = c["grid"]["lr"], c["grid"]["batch"]
    z = np.full((len(batches), len(lrs)), np.nan)
    best = c["best"]["loss"]
    for lr, b, loss in c["points"]:
        z[batches.index(b), lrs.index(lr)] = 100 * (loss / best - 1)
    image = ax.imshow(z, origin="lower", cmap="viridis_r", aspect="auto", vmin=0)
    limit = best * (1 + c["near_optimal"]["tolerance"])
    for lr, b, loss in c["points"]:
        if loss <= limit:
            xy = (lrs.index(lr) - 0.5, batches.index(b) - 0.5)
            ax.add_patch(Rectangle(xy, 1, 1, fill=False, ec="white", lw=1.5))
    ax.plot(lrs.index(c["best"]["lr"]), batches.index(c["best"]["batch"]), "*", ms=11, c="red")
    opt = c["optimum"]
    ax.plot(_index(lrs, opt["lr"]), _index(batches, opt["batch"]), "x", ms=8, c="black")
    ax.grid(False)  # the cells are the grid
    ax.set_xticks(range(len(lrs)), [tick_text(v) for v in lrs], rotation=45, fontsize=6)
    ax.set_yticks(range(len(batches)), [tick_text(v) for v in batches], fontsize=6)
    ax.set_xlabel("learning rate", fontsize=7)
    ax.set_ylabel("batch size (tokens)", fontsize=7)
    ax.set_title(f"{c['variant']} N {c['N']:.3g}, D {c['D']:.3g}", fontsize=7)
    return image


def loss_surfaces(hparams: dict):
    """One heatmap per cell (up to MAX_PANELS, by N then D): loss relative to the cell's best."""
    cells = sorted(surface_cells(hparams), key=lambda c: (c["variant"], c["N"], c["D"]))
    cells = cells[:MAX_PANELS]
    cols = min(3, len(cells))
    rows = -(-len(cells) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.3 * cols, 2.9 * rows), squeeze=False)
    for ax in axes.ravel()[len(cells) :]:
        ax.set_visible(False)
    for ax, c in zip(axes.ravel(), cells):
        image = _panel(ax, c)
        fig.colorbar(image, ax=ax, label="loss above best (%)").ax.tick_params(labelsize=6)
    fig.tight_layout()
    return fig
