"""benchmarks.porian on a synthetic ladder whose exponent a is known at every step."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analysis.data.synthetic import isoflop_runs
from analysis.fits.isoflop import DEFAULT_SEED_NOISE, isoflop_report
from analysis.fits.laws.chinchilla import Parametric
from benchmarks import porian

BUDGETS = (1e17, 3e17, 1e18, 3e18, 1e19)
# a = beta / (alpha + beta): 0.8, 0.6, 0.5
LAWS = {
    "kaplan": Parametric(E=1.8, A=400.0, B=400.0, alpha=0.1, beta=0.4),
    "head": Parametric(E=1.8, A=400.0, B=400.0, alpha=0.2, beta=0.3),
    "tuned": Parametric(E=1.8, A=400.0, B=400.0, alpha=0.3, beta=0.3),
}


def ladder() -> pd.DataFrame:
    parts = []
    for i, (step, law) in enumerate(LAWS.items()):
        runs = isoflop_runs(law, budgets=BUDGETS, sizes_per_budget=7, noise=0.002, seed=i)
        # a negligible head (vocab 1 x d_model 1) and exact C = 6ND: the law's own a
        parts.append(
            runs.assign(step=step, run_id=step + runs["run_id"], C_exact=runs["C"]).assign(
                **{"model.vocab_size": 1, "model.d_model": 1}
            )
        )
    return pd.concat(parts, ignore_index=True)


def test_each_step_recovers_its_exponent_beside_porians(tmp_path):
    csv = tmp_path / "runs.csv"
    ladder().to_csv(csv, index=False)
    rows = porian.exponent_table(pd.read_csv(csv), n_boot=200, seed=0)
    assert [r["step"] for r in rows] == ["kaplan", "head", "tuned"]  # in the paper's order
    for r, truth in zip(rows, (0.8, 0.6, 0.5)):
        assert r["a"] == pytest.approx(truth, abs=0.02)
        lo, hi = r["ci95"]
        assert lo <= r["a"] <= hi and r["n_budgets"] == 5
    assert [r["porian_refinedweb"] for r in rows] == [0.835, 0.706, 0.497]
    out = tmp_path / "table.md"
    assert porian.main(["--csv", str(csv), "--bootstrap", "200", "--out", str(out)]) == 0
    text = out.read_text()
    assert "| kaplan | Kaplan-style" in text and "| 0.835 |" in text and "| 0.497 |" in text


def test_steps_after_kaplan_count_the_head_and_exact_flops():
    runs = pd.DataFrame(
        {
            "N": [1e4],
            "C": [6e10],
            "C_exact": [9e10],
            "model.vocab_size": [1024],
            "model.d_model": [32],
        }
    )
    counted = porian.as_counted(runs, counts_head=True)
    assert counted["N"].iloc[0] == 1e4 + 1024 * 32 and counted["C"].iloc[0] == 9e10
    assert porian.as_counted(runs, counts_head=False) is runs
    with pytest.raises(porian.InputError, match=r"needs column\(s\) \['C_exact'\]"):
        porian.as_counted(runs.drop(columns="C_exact"), counts_head=True)


def test_steps_come_from_the_sweep_names_or_fail_in_one_line(tmp_path, capsys):
    runs = pd.DataFrame({"sweep": ["porian_1_kaplan", "porian_5_tuned"]})
    assert list(porian.steps_of(runs)) == ["kaplan", "tuned"]
    bad = ladder().assign(step="warmup2")
    csv = tmp_path / "bad.csv"
    bad.to_csv(csv, index=False)
    assert porian.main(["--csv", str(csv)]) == 2
    err = capsys.readouterr().err
    assert (
        err.startswith("error: column 'step': unknown step(s) ['warmup2']") and err.count("\n") == 1
    )


def test_tuning_candidates_are_left_out():
    runs = ladder()
    worse = runs[runs["step"] == "tuned"].assign(
        loss=lambda r: r["loss"] * 1.5, tune_role="candidate"
    )
    worse = worse.assign(run_id="cand" + worse["run_id"])
    both = pd.concat([runs.assign(tune_role="chosen"), worse], ignore_index=True)
    rows = porian.exponent_table(both, n_boot=100, seed=0)
    assert rows[-1]["n_runs"] == len(runs[runs["step"] == "tuned"])


def test_the_exported_runs_regenerate_the_table_and_each_step_gets_a_figure(tmp_path, capsys):
    csv = tmp_path / "runs.csv"
    ladder().drop(columns="step").assign(
        sweep=lambda r: (
            ["porian_1_kaplan"] * (len(r) // 3)
            + ["porian_2_head"] * (len(r) // 3)
            + ["porian_5_tuned"] * (len(r) - 2 * (len(r) // 3))
        )
    ).to_csv(csv, index=False)
    out, export, figures = tmp_path / "t.md", tmp_path / "x" / "runs.csv", tmp_path / "fig"
    args = ["--bootstrap", "100", "--out", str(out)]
    assert (
        porian.main(
            ["--csv", str(csv), *args, "--runs-csv", str(export), "--figures", str(figures)]
        )
        == 0
    )
    exported = pd.read_csv(export)
    assert sorted(set(exported["step"])) == ["head", "kaplan", "tuned"]  # named from `sweep`
    assert sorted(p.name for p in figures.iterdir()) == [
        "isoflop_head.png",
        "isoflop_kaplan.png",
        "isoflop_tuned.png",
    ]
    first = out.read_text()
    assert porian.main(["--csv", str(export), *args]) == 0
    assert out.read_text() == first
    capsys.readouterr()
    assert porian.main(["--csv", str(csv), "--figures", str(out)]) == 2
    assert capsys.readouterr().err.startswith("error: --figures: ")


# ---------------------------------------------------------------- approach 2's interval


# The authors' IsoFLOP profiles and published intervals, taken (numbers only) from
# github.com/formll/resolving-scaling-law-discrepancies at 0dc60d91 (docs/analysis.md says
# how); not committed here: point PORIAN2024_DATA at the folder to run these tests.
PUBLISHED = Path(os.environ.get("PORIAN2024_DATA", "/nonexistent"))
needs_published = pytest.mark.skipif(
    not (PUBLISHED / "published.csv").is_file(),
    reason="PORIAN2024_DATA: the authors' profiles (isoflop_points.csv, published.csv)",
)


def porian_sets():
    """(dataset, step, their runs, their published row) of the ten Figure-1 sets."""
    points = pd.read_csv(PUBLISHED / "isoflop_points.csv")
    for _, row in pd.read_csv(PUBLISHED / "published.csv").iterrows():
        runs = points[(points["dataset"] == row["dataset"]) & (points["step"] == row["step"])]
        runs = runs.reset_index(drop=True).assign(run_id=lambda r: [f"r{i}" for i in r.index])
        yield row["dataset"], row["step"], runs, row


@needs_published
def test_approach_2_intervals_cover_porians_published_exponents():
    """On the authors' own IsoFLOP profiles, with the seed noise their bootstrap adds, the
    noise-and-resample interval holds their published a in all ten sets and overlaps their
    interval. Resampling budgets alone (no noise) misses OpenWebText2's cosine-decay 0.574."""
    for dataset, step, runs, pub in porian_sets():
        section = isoflop_report(runs, n_boot=400, seed=0, noise=pub["seed_noise"])
        lo, hi = section["ci95"]["a"]
        assert section["not_identified"] == [] and section["noise"]["source"] == "given"
        assert lo <= pub["a"] <= hi, (dataset, step, lo, hi, pub["a"])
        assert lo <= pub["a_hi"] and pub["a_lo"] <= hi
        if (dataset, step) == ("owt2", "decay"):
            narrow = isoflop_report(runs, n_boot=400, seed=0, noise=0.0)["ci95"]["a"]
            assert not narrow[0] <= pub["a"] <= narrow[1]
            assert hi - lo > 1.5 * (narrow[1] - narrow[0])


def test_the_seed_noise_comes_from_repeated_runs_or_the_projects_measurement():
    """Three seeds of every (budget, N) at a known spread: the estimate recovers it; one seed:
    the project's measured default, said so."""
    law = Parametric(E=1.8, A=400.0, B=400.0, alpha=0.3, beta=0.3)
    one = isoflop_runs(law, budgets=BUDGETS, sizes_per_budget=7, noise=0.0, seed=0)
    rng = np.random.default_rng(0)
    seeds = pd.concat([one] * 3, ignore_index=True)
    seeds["loss"] = seeds["loss"] + 0.02 * rng.standard_normal(len(seeds))
    seeds["run_id"] = [f"s{i}" for i in range(len(seeds))]
    measured = isoflop_report(seeds, n_boot=50, seed=0)["noise"]
    assert measured["source"] == "seeds" and measured["n_cells"] == len(one)
    assert measured["sigma"] == pytest.approx(0.02, rel=0.15)
    default = isoflop_report(one, n_boot=50, seed=0)["noise"]
    assert default == {"sigma": DEFAULT_SEED_NOISE, "source": "default", "n_cells": 0}
