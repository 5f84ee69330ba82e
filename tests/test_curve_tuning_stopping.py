"""The staged curve-aware tuning rule (`analysis.tuning.curve_tuning.decide`, `sweep.tune_curve` with
`rule: staged`) on synthetic curve families with a known best: it chooses early where the
prefixes separate, buys a later rung where they do not (noise, late crossings, the plateau),
and never picks a candidate the data rank in the bottom half."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from analysis.fits.laws.curve import TISSUE, features
from analysis.tuning import curve_check, curve_tuning, tuning_validation
from analysis.tuning import schedule_replay as R
from analysis.tuning.curve_tuning import Prediction, decide

BT = 64
STEPS = 600  # per candidate: rungs at 100, 200, 400 steps for 8 candidates at 3 runs


def family(shapes, noise=2e-3, seed=0, entropy=math.nan, flat=()):
    """One arm's full grid: candidate i's train loss at every step from the Tissue law with
    its own (L0, A, alpha), relative noise; its final loss the law's at the last step. The
    candidates in `flat` sit at `entropy` (the plateau) with the same noise."""
    rng = np.random.default_rng(seed)
    rows, points = [], []
    for i, (floor, a, alpha) in enumerate(shapes):
        row = {
            "run_id": f"c{i}",
            "variant": "v",
            "N": 1e5,
            "seed": 0,
            "train.lr": 1e-3 * (i + 1),
            "train.warmup": 0.05,
            "train.tokens": BT * STEPS,
            "train.batch_tokens": BT,
            "train.schedule": "wsd",
            "train.decay_fraction": 0.2,
            "train.min_lr_ratio": 0.1,
            "D": BT * STEPS,
            "unigram_entropy": entropy,
        }
        lrs = R.lrs_of(row)
        warm = R.warmup_steps(row["train.warmup"], lrs.size)
        theta = TISSUE.to_theta({"L0": floor, "A": a, "alpha": alpha, "C": 0.3})
        steps = np.arange(1, lrs.size + 1)
        law = TISSUE.predict(theta, features("tissue", lrs, np.maximum(steps - 1, 1), warm))[0]
        if i in flat:
            law = np.full(law.size, entropy)
        row["loss"] = float(law[-1])
        rows.append(row)
        loss = law * np.exp(noise * rng.standard_normal(law.size))
        points.append(
            pd.DataFrame(
                {
                    "run_id": row["run_id"],
                    "tokens": steps * BT,
                    "val_loss": np.nan,
                    "train_loss": loss,
                    "lr": lrs,
                }
            )
        )
    return pd.DataFrame(rows), pd.concat(points, ignore_index=True)


SPREAD = [(2.5 + 0.5 * i, 0.9, 0.45) for i in range(8)]  # floors 0.5 apart: c0 best


def test_rungs_double_and_the_worst_case_is_the_budget():
    rungs = curve_tuning.staged_rungs(8, BT * STEPS, BT, runs=3.0)
    assert rungs == (BT * 100, BT * 200, BT * 400)
    # 8 t + 4 t + 2 (2 t) + D - 4 t = 3 D with t = D / 6
    assert curve_tuning.staged_cost(8, BT * STEPS, rungs, [8, 4, 2]) == 3 * BT * STEPS
    # decided at the first rung: 8 t + D - t
    assert curve_tuning.staged_cost(8, BT * STEPS, rungs, [8]) == BT * (800 + 500)


def _best(runs):
    return f"{runs.loc[runs['loss'].idxmin(), 'train.lr']:g}"


def test_separated_prefixes_are_decided_early():
    # floors 0.5 apart, 0.2% noise: the first prefixes already rank them
    runs, points = family(SPREAD)
    row = curve_check.check(runs, points, ["train.lr"], rule="staged").iloc[0]
    assert row["choice"] == _best(runs) == "0.001" and row["regret"] == 0.0
    assert row["decided_at"] == "1/3" and "7 other(s) separated" in row["why"]
    assert row["cost_runs"] == pytest.approx(13 / 6)  # 8 t + D - t, t = D / 6


def test_overlapping_predictions_buy_a_later_rung_and_still_find_the_best():
    # floors 0.02 apart under 2% noise: the first prefix cannot tell the leaders apart
    shapes = [(3.0 + 0.02 * i, 0.9, 0.45) for i in range(8)]
    runs, points = family(shapes, noise=0.02, seed=3)
    row = curve_check.check(runs, points, ["train.lr"], rule="staged").iloc[0]
    assert row["decided_at"] != "1/3" and row["cost_runs"] > 13 / 6
    assert row["cost_runs"] <= 3.0 + 1e-9 and row["rank"] <= 2


def test_curves_that_cross_late_are_ranked_by_where_they_go_not_where_they_are():
    # c1 leads at every rung (fast, high floor) and ends 0.11 above c0, which starts slower
    shapes = [(2.6, 0.3, 1.0), (3.0, 0.3, 0.3)] + [(3.6 + 0.1 * i, 0.9, 0.45) for i in range(6)]
    runs, points = family(shapes, noise=1e-3)
    loss = points.set_index(["run_id", "tokens"])["train_loss"]
    for step in (100, 200, 400):
        assert loss["c1", BT * step] < loss["c0", BT * step]
    assert _best(runs) == "0.001" and runs["loss"].iloc[1] - runs["loss"].iloc[0] > 0.1
    staged = curve_check.check(runs, points, ["train.lr"], rule="staged").iloc[0]
    assert staged["choice"] == "0.001" and staged["regret"] == 0.0
    last = curve_check.check(runs, points, ["train.lr"], rule="last").iloc[0]
    assert last["choice"] == "0.002"  # the baseline ranks by where they are


def test_a_curve_on_the_plateau_is_not_identified_and_its_finalists_decay():
    # every candidate still at the unigram entropy at every rung: no prefix ranks them, so
    # the two lowest at the last rung decay and their measured final losses choose
    runs, points = family(SPREAD, entropy=6.0, flat=range(8))
    first = points[points["run_id"] == "c0"]
    pred = curve_tuning.predict(runs.iloc[0], first["tokens"], first["train_loss"], BT * 100)
    assert pred.se == math.inf and pred.why == "on the plateau"
    row = curve_check.check(runs, points, ["train.lr"], rule="staged").iloc[0]
    assert row["decided_at"] == "3/3" and "on the plateau: 2 decay" in row["why"]
    # 8 t + 4 t + 2 (2 t) + 2 (D - 4 t) with t = D / 6: two finalists decay
    assert row["cost_runs"] == pytest.approx(2 + 8 / 6)


def test_decide_keeps_half_by_both_rankings_and_chooses_by_the_loss_at_the_last_rung():
    # the prediction ranks c0 < c1 < ... ; the current loss the other way round
    p = {f"c{i}": Prediction(3.0 + 0.01 * i, 0.05, 3.5 - 0.01 * i) for i in range(8)}
    d = decide(p, last_rung=False)
    assert d.chosen is None and d.keep == ("c0", "c1", "c2", "c7")  # 3 of each, 4 in all
    assert decide(p, last_rung=True).chosen == "c7"  # the lowest train loss at the last rung
    p["c9"] = Prediction(math.nan, math.inf, 2.0, "no fit")  # ranks by its last losses
    assert decide(p, last_rung=False).keep[0] == "c9"
    far = {"a": Prediction(3.0, 0.01, 3.2), "b": Prediction(3.5, 0.01, 3.6)}
    assert decide(far, last_rung=False).chosen == "a" and "separated" in decide(far, False).why
    close = {"a": Prediction(3.0, 0.3, 3.2), "b": Prediction(3.5, 0.3, 3.6)}
    assert decide(close, last_rung=False).chosen == "a"  # half of 2 is 1
    flat = {
        k: Prediction(6.0, math.inf, 6.0 + i / 100, "on the plateau") for i, k in enumerate("abc")
    }
    d = decide(flat, last_rung=True)
    assert d.chosen is None and d.finalists == ("a", "b")


def test_leave_one_grid_out_reports_held_out_regret(tmp_path, capsys):
    folders = []
    for fam, base in (("a", 3.0), ("b", 4.0)):
        for seed in (0, 1):
            runs, points = family([(base + 0.15 * i, 0.9, 0.45) for i in range(8)], seed=seed)
            runs["loss"] += 0.01 * seed
            d = tmp_path / f"{fam}{seed}"
            d.mkdir()
            runs.to_csv(d / "runs.csv", index=False)
            points.to_csv(d / "curves.csv", index=False)
            folders.append(str(d))
    out = tmp_path / "v.md"
    argv = ["--tune", "train.lr", "--z", "2", "--out", str(out)]
    argv += ["--grid", f"a={folders[0]},{folders[1]}", "--grid", f"b={folders[2]},{folders[3]}"]
    assert tuning_validation.main(argv) == 0
    text = out.read_text()
    assert "over 4 held-out arms it chose a value within the arm's seed spread at 4" in text
    assert "| a | staged (z=2) | 2 | 2 |" in text
    capsys.readouterr()
    assert tuning_validation.main(["--tune", "train.lr", "--grid", f"a={folders[0]}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --grid: at least two families") and err.count("\n") == 1
