"""The decision-accuracy figure: how often a smaller budget's verdict agrees with the largest.

A function of fit.json's `ablation.decision` (`analysis.verdicts.decision`), drawn with matplotlib and
saved by `analysis.report.plots.save` like every report figure (deterministic SVG and PNG).
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402


def agreement(decision: dict, baseline: str):
    """Share of smaller-budget verdicts agreeing with each pair's largest measured one against
    the compute fraction C / C_largest: same verdict (better / worse / cannot tell) and same
    sign of m - 1; each level labelled with its number of cells."""
    levels = decision["levels"]
    x = np.array([r["fraction"] for r in levels], dtype=float)
    fig, ax = plt.subplots(figsize=(6, 3.6))
    for key, label, marker in (
        ("verdict_agreement", "same verdict as the largest budget", "o"),
        ("sign_agreement", "same sign of m - 1 (DataDecide's rule)", "s"),
    ):
        y = np.array([r[key] for r in levels], dtype=float)
        ax.plot(x, y, marker=marker, ls="-", label=label)
    for r in levels:
        ax.annotate(
            f"{r['cells']} cell{'' if r['cells'] == 1 else 's'}",
            (r["fraction"], 0.02),
            ha="center",
            fontsize=7,
            color="gray",
        )
    ax.axhline(1.0, color="gray", ls=":", lw=1)
    ax.set_xscale("log")
    # the limits from the fractions themselves: autoscaling from the lines alone fails on a
    # log axis when every agreement is nan (no level with a comparable verdict)
    ax.set_xlim(x.min() / 1.5, x.max() * 1.5)
    ax.set_ylim(-0.05, 1.08)
    ax.set_xlabel("compute fraction C / the pair's largest measured C")
    ax.set_ylabel(f"agreement (pairs vs {baseline})")
    # above the axes: inside, at any corner, it can cover a level's label or a point
    ax.legend(fontsize=7, loc="lower center", bbox_to_anchor=(0.5, 1.01), ncol=2, frameon=False)
    return fig
