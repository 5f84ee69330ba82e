"""Efficiency leverage of MoE configurations (analysis.verdicts.leverage, the report's leverage
section) on synthetic runs whose leverage law is known.

The dense baseline's frontier is L_b(C) = 30 C^-0.08 over 10 budgets (1e12..5.1e14, 2x apart);
a MoE configuration of activation ratio A has L(C) = L_b(EL(A, C) C) at 6 budgets (1e12..3.2e13)
with log EL = A0 + B0 log(1/A) + C0_ log(C / 1e13), so its multiplier is EL at every budget and
the baseline's measured compute covers EL x C. Two sizes per budget (the smaller on the frontier,
the other 0.15 nats above), 2 seeds, seed noise 0.03 nats.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from analysis.verdicts import leverage as el
from analysis.verdicts.ablation import compare_variants

A0, B0, C0_ = 0.1, 0.3, 0.06
SIGMA = 0.03
BASE_BUDGETS = [1e12 * 2**k for k in range(10)]
MOE_BUDGETS = BASE_BUDGETS[:6]


def law(C):
    return 30 * np.asarray(C, dtype=float) ** -0.08


def true_el(A, C):
    return math.exp(A0 + B0 * math.log(1 / A) + C0_ * math.log(C / 1e13))


def moe_runs(seed: int, configs, dense_variant: bool = False) -> pd.DataFrame:
    """The baseline and one MoE variant per (n_experts, top_k, n_shared, G) in `configs`."""
    rng = np.random.default_rng(seed)
    arms = [("dense", None, BASE_BUDGETS)]
    arms += [(f"moe{e}x{k}s{s}g{g}", (e, k, s, g), MOE_BUDGETS) for e, k, s, g in configs]
    if dense_variant:
        arms.append(("wider", None, MOE_BUDGETS))
    rows = []
    for variant, cfg, budgets in arms:
        for k, C in enumerate(budgets):
            if cfg is None:
                frontier = float(law(C)) - (0.02 if variant == "wider" else 0.0)
            else:
                e, top, s, _ = cfg
                frontier = float(law(true_el((top + s) / (e + s), C) * C))
            for N, above in ((1e4 * 2 ** (k / 2), 0.0), (3e4 * 2 ** (k / 2), 0.15)):
                for seed_ in (0, 1):
                    row = {"variant": variant, "seed": seed_, "N": N, "D": C / (6 * N)}
                    row["loss"] = frontier + above + rng.normal(0, SIGMA)
                    if cfg is not None:
                        row |= {
                            "model.mlp": "moe",
                            "model.n_experts": cfg[0],
                            "model.top_k": cfg[1],
                            "model.n_shared_experts": cfg[2],
                            "model.moe_granularity": cfg[3],
                        }
                    rows.append(row)
    runs = pd.DataFrame(rows)
    runs.insert(0, "run_id", [f"r{i}" for i in range(len(runs))])
    return runs.assign(C=6 * runs["N"] * runs["D"])


THREE_RATIOS = [(4, 2, 0, 1), (8, 2, 0, 1), (16, 2, 0, 1), (16, 2, 0, 4)]


@pytest.fixture(scope="module")
def three():
    runs = moe_runs(0, THREE_RATIOS)
    return runs, el.leverage(runs, compare_variants(runs, baseline="dense", n_boot=200, seed=0))


def test_configurations_read_activation_ratio_and_granularity_from_the_runs(three):
    _, result = three
    configs = result["configurations"]
    assert configs["moe8x2s0g1"]["A"] == pytest.approx(0.25)
    assert configs["moe16x2s0g4"]["A"] == pytest.approx(0.125)
    assert configs["moe16x2s0g4"]["G"] == 4
    assert set(configs) == {f"moe{e}x{k}s{s}g{g}" for e, k, s, g in THREE_RATIOS}
    # a shared expert counts as active and as an expert: (2 + 1) / (8 + 1)
    one = el.configurations(moe_runs(0, [(8, 2, 1, 1)]), "dense")
    assert one["moe8x2s1g1"]["A"] == pytest.approx(3 / 9)


def test_each_points_leverage_is_the_ablations_multiplier(three):
    runs, result = three
    ablation = compare_variants(runs, baseline="dense", n_boot=200, seed=0)
    use = [p for p in result["points"] if p["EL"] is not None]
    assert len(use) == 24  # every measured budget is inside the baseline's measured compute
    for p in use:
        m = next(m for m in ablation["variants"][p["variant"]]["multipliers"] if m["C"] == p["C"])
        assert (p["EL"], p["ci95"]) == (m["multiplier"], list(m["ci95"]))
    off = [abs(math.log(p["EL"] / true_el(p["A"], p["C"]))) for p in use]
    assert np.median(off) < 0.15


def test_the_law_recovers_its_coefficients_within_their_intervals():
    """Over 10 synthetic sweeps each coefficient's 95% interval holds the truth at least 8
    times (measured: a 20, b 20, c 19 of 20 seeds), and the law describes its points."""
    covered = {"a": 0, "b": 0, "c": 0}
    for seed in range(10):
        runs = moe_runs(seed, THREE_RATIOS)
        law = el.leverage(runs, compare_variants(runs, baseline="dense", n_boot=100, seed=seed))[
            "law"
        ]
        assert law["not_identified"] == [] and (law["n_ratios"], law["n_budgets"]) == (3, 6)
        truth = {"a": A0 + C0_ * math.log(law["C0"] / 1e13), "b": B0, "c": C0_}
        for k, value in truth.items():
            lo, hi = law["ci95"][k]
            covered[k] += lo <= value <= hi
            assert hi - lo < 0.6
        assert law["check"]["describes"]
    assert min(covered.values()) >= 8, covered


def test_one_activation_ratio_leaves_its_coefficient_not_identified_with_no_number():
    runs = moe_runs(1, [(8, 2, 1, 1)])
    result = el.leverage(runs, compare_variants(runs, baseline="dense", n_boot=100, seed=1))
    law = result["law"]
    assert law["why_not_identified"]["b"] == "1 distinct activation ratio(s) (needs 3)"
    assert "b" not in law["coefficients"] and "b" not in law["ci95"]
    assert "c" in law["coefficients"]  # the budgets still identify the compute trend
    sentence = el.law_sentence(law)
    assert "b: not identified: 1 distinct activation ratio(s) (needs 3)" in sentence
    assert "a (log EL at C0, A = 0.333)" in sentence  # the configuration's own level


def _report(runs: pd.DataFrame) -> tuple[list[tuple], dict]:
    """The report's blocks and fit.json through the loop over its sections (no law fit: the
    baseline's L(N, D) is not what this section reads, and fitting it takes minutes)."""
    from pathlib import Path

    from analysis.report import analyse, compose
    from analysis.report.section import Context

    ablation = compare_variants(runs, baseline="dense", n_boot=50, seed=0)
    an = analyse.Analysis(
        runs=runs,
        grid_runs=None,
        base=runs[runs["variant"] == "dense"],
        curves=None,
        fits=None,
        law_comparison=[],
        ablation=ablation,
        tuned=None,
        rule=None,
    )
    ctx = Context(fig_dir=Path("unused"), excluded=pd.DataFrame())
    fit = json.loads(json.dumps(compose.fit_json(an), default=float))  # what fit.json holds
    return compose.build_blocks(an, [], "t", ctx), fit


def test_the_report_has_a_leverage_section_only_with_moe_variants():
    blocks, fit = _report(moe_runs(2, [], dense_variant=True))
    assert not any("leverage" in str(b).lower() for b in blocks) and "leverage" not in fit

    blocks, fit = _report(moe_runs(2, [(8, 2, 1, 1)]))
    start = blocks.index(("h2", "Efficiency leverage of the MoE configurations"))
    _, header, rows = blocks[start + 2]
    assert header[:4] == ["A", "G", "variant", "experts"]
    assert rows[0][:4] == ["0.333", "1", "moe8x2s1g1", "8 experts, top-2, 1 shared"]
    law = blocks[start + 3][1]
    assert "b: not identified: 1 distinct activation ratio(s) (needs 3)" in law
    notes = next(b[1] for b in blocks if b[0] == "list" and any("Efficiency" in x for x in b[1]))
    assert any("not identified: 1 distinct activation ratio" in x for x in notes)
    assert fit["leverage"]["configurations"]["moe8x2s1g1"]["A"] == pytest.approx(1 / 3)
    assert "b" not in fit["leverage"]["law"]["coefficients"]


def test_configurations_are_grouped_by_activation_ratio_then_granularity(three):
    runs, _ = three
    blocks, _ = _report(runs)
    start = blocks.index(("h2", "Efficiency leverage of the MoE configurations"))
    rows = blocks[start + 2][2]
    keys = [(float(r[0]), float(r[1])) for r in rows]
    assert keys == sorted(keys) and len(set(keys)) == 4  # (A, G) pairs, A = 0.125 twice
    assert {r[1] for r in rows if r[0] == "0.125"} == {"1", "4"}
