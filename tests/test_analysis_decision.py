"""Decision accuracy (analysis.verdicts.decision) on a hand-built ladder whose verdicts are known.

Frontiers L(C) = A C^-gamma at budgets 1e12..1e15, three sizes per budget (the middle one on
the frontier), two seeds, tiny noise: `good` reaches base's loss with a quarter of the compute
(m = 4: better everywhere); `flip` = 15 C^-0.04 crosses base = 20 C^-0.05 at C ~ 3.1e12, so it is
better at 1e12 (m ~ 1.24) and worse from 1e13 on (m ~ 0.31 at 1e15).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from analysis.report.cli import main as report_main
from analysis.verdicts import decision
from analysis.verdicts.ablation import compare_variants

BUDGETS = [1e12, 1e13, 1e14, 1e15]
FRONTIERS = {
    "base": lambda C: 20 * C**-0.05,
    "good": lambda C: 20 * (4 * C) ** -0.05,
    "flip": lambda C: 15 * C**-0.04,
}


def ladder(seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    rows = []
    for v, law in FRONTIERS.items():
        for C in BUDGETS:
            for i, N in enumerate((1e4, 3e4, 1e5)):
                for s in (0, 1):
                    loss = law(C) + (0.0 if i == 1 else 0.05) + rng.normal(0, 0.002)
                    rows.append({"variant": v, "seed": s, "N": N, "D": C / (6 * N), "loss": loss})
    runs = pd.DataFrame(rows)
    runs.insert(0, "run_id", [f"r{i}" for i in range(len(runs))])
    return runs.assign(C=6 * runs["N"] * runs["D"])


@pytest.fixture(scope="module")
def ablation():
    return compare_variants(ladder(), n_boot=200, seed=0)


def test_verdicts_at_each_budget_are_the_known_ones(ablation):
    table = decision.verdicts(ablation)
    got = {v: list(g["verdict"]) for v, g in table.groupby("variant")}
    assert got["good"] == ["better"] * 4
    assert got["flip"] == ["better", "worse", "worse", "worse"]
    flip = table[table["variant"] == "flip"]
    assert list(flip["reference"]) == ["worse"] * 4
    assert list(flip["agrees"]) == [False, True, True, True]
    assert list(flip["largest"]) == [False, False, False, True]
    assert flip["fraction"].round(6).tolist() == [1e-3, 1e-2, 1e-1, 1.0]


def test_agreement_by_compute_fraction_and_overall(ablation):
    d = decision.section(None, ablation, None, 200, 0)
    levels = pd.DataFrame(d["levels"])
    assert levels["fraction"].round(6).tolist() == [1e-3, 1e-2, 1e-1]
    assert levels["cells"].tolist() == [2, 2, 2]
    # at 1e-3 of the largest budget `flip` says better, the largest says worse
    assert levels["verdict_agreement"].tolist() == [0.5, 1.0, 1.0]
    assert levels["sign_agreement"].tolist() == [0.5, 1.0, 1.0]
    assert d["n_smaller"] == 6
    assert d["verdict_agreement"] == pytest.approx(5 / 6)
    assert d["sign_agreement"] == pytest.approx(5 / 6)
    (sentence,) = d["disagreements"]  # said plainly, for the one pair that disagrees
    assert sentence.startswith("flip: 1 of 3 smaller budgets give the opposite verdict")
    assert "better at C = 1e+12" in sentence and "worse at C = 1e+15" in sentence


def test_target_compute_is_an_extrapolation_with_an_interval_never_a_verdict(ablation):
    d = decision.section(ladder(), ablation, 1e17, 200, 0)
    t = d["target"]
    assert t["beyond_measured"] and t["C"] == 1e17
    assert t["variants"]["good"]["multiplier"] == pytest.approx(4.0, rel=0.05)
    assert t["variants"]["good"]["direction"] == "above 1"
    assert t["variants"]["flip"]["direction"] == "below 1"
    assert t["variants"]["flip"]["ci95"][1] < 1
    flip = [c for c in d["cells"] if c["variant"] == "flip"]
    assert [c["agrees_with_target"] for c in flip] == [False, True, True, True]
    text = "\n".join(str(b[1]) for b in decision.summary_blocks({**ablation, "decision": d}))
    assert "Extrapolation, not a measurement" in text
    assert "verdict" not in text.split("Extrapolation, not a measurement")[1]


def test_one_budget_per_pair_has_nothing_to_agree_with():
    runs = ladder()
    runs = runs[runs["C"] == 1e15]
    ab = {
        "baseline": "base",
        "variants": {
            "base": {"multipliers": []},
            "good": {
                "multipliers": [
                    {"C": 1e15, "measured": True, "multiplier": 4.0, "verdict": "better"}
                ]
            },
        },
    }
    d = decision.section(runs, ab, None, 10, 0)
    assert d["n_smaller"] == 0 and d["levels"] == []
    assert decision.summary_blocks({**ab, "decision": d}) == [
        ("p", "Decision accuracy: every pair is measured at one budget only.")
    ]


def test_the_report_states_decision_accuracy_and_draws_the_figure(tmp_path):
    csv = tmp_path / "runs.csv"
    runs = ladder()
    runs[runs["N"] == 3e4].to_csv(csv, index=False)  # one size: an ablation report, no law fit
    out = tmp_path / "out"
    argv = ["--csv", str(csv), "--out", str(out), "--bootstrap", "200", "--target-compute", "1e17"]
    assert report_main(argv) == 0
    md = (out / "report.md").read_text()
    summary = md.split("## Summary")[1].split("\n## ")[0]
    assert "Decision accuracy over the ladder: of the 6 verdicts" in summary
    assert "83% give the same verdict as the largest" in summary
    assert "The small budgets disagree with the largest:" in summary
    assert "Time multiplier: not recorded for these runs" in summary
    assert "Extrapolation, not a measurement: the fitted laws' multiplier at C = 1e+17" in summary
    assert "## Decision accuracy: verdicts at smaller budgets against the largest" in md
    assert (out / "figures" / "agreement.svg").is_file()


def test_agreement_figure_when_no_level_has_a_comparable_verdict(tmp_path):
    """Every agreement nan (no smaller-budget cell with a verdict to compare): the figure is
    still drawn on its fractions' log axis (it used to fail: autoscaling from all-nan lines)."""
    from analysis.report import plots  # lazy in the report too: seaborn ~3 s
    from analysis.verdicts import decision_plot

    levels = [
        {"fraction": f, "cells": 2, "verdict_agreement": np.nan, "sign_agreement": np.nan}
        for f in (0.1, 0.33)
    ]
    fig = decision_plot.agreement({"levels": levels}, "base")
    plots.save(fig, tmp_path, "agreement")
    assert (tmp_path / "agreement.svg").stat().st_size > 0
    lo, hi = fig.axes[0].get_xlim()
    assert 0 < lo < 0.1 and hi > 0.33


def test_agreement_legend_covers_no_cell_label_and_no_point():
    from analysis.report import plots
    from analysis.verdicts import decision_plot

    # the demo's levels: every agreement at 1, one cell each, the right-most level near 1
    levels = [
        {"fraction": f, "cells": 1, "verdict_agreement": 1.0, "sign_agreement": 1.0}
        for f in (0.07, 0.17, 0.4)
    ]
    plots.setup()
    fig = decision_plot.agreement({"levels": levels}, "pre-rmsnorm-rope-gqa2-swiglu")
    fig.canvas.draw()
    ax = fig.axes[0]
    box = ax.get_legend().get_window_extent()
    labels = [t for t in ax.texts if "cell" in t.get_text()]
    assert [t.get_text() for t in labels] == ["1 cell"] * 3
    assert not any(box.overlaps(t.get_window_extent()) for t in labels)
    assert not box.overlaps(ax.get_window_extent())  # nor any point or line
    assert not box.overlaps(ax.yaxis.label.get_window_extent())
