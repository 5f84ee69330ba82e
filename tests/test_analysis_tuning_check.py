"""analysis.tuning_check: halving's choice per arm against the full grid's, from two CSVs whose
losses are written by hand, so every rank, regret, margin and replay is known."""

import pandas as pd
import pytest

from analysis.tuning import tuning_check

LRS = (1e-3, 2e-3, 4e-3)
# the full grid's final losses per arm (variant, N) at D = 1000
# 8e-3 is in the grid only: halving never tried it, so it is left out even where it is best
GRID = {
    ("a", 100.0): {1e-3: 3.30, 2e-3: 3.10, 4e-3: 3.20, 8e-3: 3.0},  # best tried: 2e-3
    ("b", 300.0): {1e-3: 3.00, 2e-3: 2.90, 4e-3: 2.95, 8e-3: 3.5},  # 2e-3, then 4e-3 (margin 0.05)
}
# what halving chose, and its decayed winner's final loss
CHOSEN = {("a", 100.0): (2e-3, 3.1001), ("b", 300.0): (4e-3, 2.9502)}


def _grid_csv(path):
    rows = [
        {
            "run_id": f"g{i}",
            "variant": v,
            "N": n,
            "D": 1000.0,
            "loss": loss,
            "train.lr": lr,
            "tune_role": "candidate",
        }
        for i, ((v, n), losses) in enumerate((k, x) for k, x in GRID.items())
        for lr, loss in losses.items()
    ]
    for i, r in enumerate(rows):
        r["run_id"] = f"g{i}"
    pd.DataFrame(rows).to_csv(path, index=False)


def _tuned_csv(path, with_role=True):
    rows = []
    for (v, n), (lr, loss) in CHOSEN.items():
        for other in LRS:  # halving's segments: stopped before D, never an arm's result
            rows.append(
                {
                    "variant": v,
                    "N": n,
                    "D": 250.0,
                    "loss": 4.0,
                    "train.lr": other,
                    "tune_role": "candidate",
                    "arm": f"{v}1",
                }
            )
        rows.append(
            {
                "variant": v,
                "N": n,
                "D": 1000.0,
                "loss": loss,
                "train.lr": lr,
                "tune_role": "chosen",
                "arm": f"{v}1",
            }
        )
        # a larger budget trained with the transferred value: not checked (no grid there)
        rows.append(
            {
                "variant": v,
                "N": n,
                "D": 4000.0,
                "loss": 2.0,
                "train.lr": lr,
                "tune_role": "transfer",
                "arm": f"{v}2",
            }
        )
    df = pd.DataFrame(rows)
    df.insert(0, "run_id", [f"t{i}" for i in range(len(df))])
    if not with_role:
        df = df.drop(columns="tune_role")
    df.to_csv(path, index=False)


def test_rank_regret_margin_and_replay_per_arm(tmp_path, capsys):
    _grid_csv(tmp_path / "grid.csv")
    _tuned_csv(tmp_path / "tuned.csv")
    out = tmp_path / "check.md"
    argv = [
        "--tuned",
        str(tmp_path / "tuned.csv"),
        "--grid",
        str(tmp_path / "grid.csv"),
        "--tune",
        "train.lr",
        "--out",
        str(out),
    ]
    assert tuning_check.main(argv) == 0
    text = out.read_text()
    assert text == capsys.readouterr().out.rstrip("\n") + "\n"
    rows = [
        line for line in text.splitlines() if line.startswith("| a ") or line.startswith("| b ")
    ]
    assert len(rows) == 2  # the transfer arms (D 4000) are not checked
    a, b = ([c.strip() for c in r.strip("|").split("|")] for r in rows)
    # arm a agrees: rank 1, no regret; the margin is 3.20 - 3.10
    assert a[3:8] == ["0.002", "0.002", "1/3", "0.000", "0.100"]
    # arm b chose the grid's second: regret 2.95 - 2.90, margin 2.95 - 2.90
    assert b[3:8] == ["0.004", "0.002", "2/3", "0.050", "0.050"]
    assert float(a[8]) == pytest.approx(1e-4) and float(b[8]) == pytest.approx(2e-4)
    assert "at 1 of 2 arms" in text and "ranks 2" in text
    assert "1 of these 1 regrets is no larger than the gap" in text
    assert "halving did not try (up to 1 per arm) are left out" in text


def test_a_curve_tuned_sweep_is_named_as_such(tmp_path, capsys):
    """Prefixes carrying `tune_budget` (curve-aware tuning's tag): the same check, its text
    and header name the strategy; the numbers do not change."""
    _grid_csv(tmp_path / "grid.csv")
    _tuned_csv(tmp_path / "tuned.csv")
    tuned = pd.read_csv(tmp_path / "tuned.csv")
    tuned["tune_budget"] = tuned["tune_role"].map({"candidate": 1000.0})
    tuned.to_csv(tmp_path / "curve.csv", index=False)
    argv = ["--grid", str(tmp_path / "grid.csv"), "--tune", "train.lr", "--tuned"]
    assert tuning_check.main([*argv, str(tmp_path / "tuned.csv")]) == 0
    halving = capsys.readouterr().out
    assert tuning_check.main([*argv, str(tmp_path / "curve.csv")]) == 0
    curve = capsys.readouterr().out
    assert curve.startswith("# Curve-aware tuning against the full grid")
    assert "Curve-aware tuning chose the full grid's value at 1 of 2 arms" in curve
    assert "| curve-aware tuning chose |" in curve and "halving" not in curve.lower()
    assert halving.startswith("# Halving against the full grid")
    assert [x for x in curve.splitlines() if x.startswith("| a ")] == [
        x for x in halving.splitlines() if x.startswith("| a ")
    ]


def test_bad_input_names_the_column_or_the_arms(tmp_path, capsys):
    _grid_csv(tmp_path / "grid.csv")
    _tuned_csv(tmp_path / "plain.csv", with_role=False)
    argv = ["--grid", str(tmp_path / "grid.csv"), "--tune", "train.lr"]
    assert tuning_check.main(["--tuned", str(tmp_path / "plain.csv"), *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "tune_role" in err
    # a grid of other arms: nothing to compare
    other = pd.read_csv(tmp_path / "grid.csv").assign(N=5.0)
    other.to_csv(tmp_path / "other.csv", index=False)
    _tuned_csv(tmp_path / "tuned.csv")
    code = tuning_check.main(
        [
            "--tuned",
            str(tmp_path / "tuned.csv"),
            "--grid",
            str(tmp_path / "other.csv"),
            "--tune",
            "train.lr",
        ]
    )
    assert code == 2 and "none of the 2 tuned arms" in capsys.readouterr().err
    # a --tune key the runs lack
    code = tuning_check.main(
        [
            "--tuned",
            str(tmp_path / "tuned.csv"),
            "--grid",
            str(tmp_path / "grid.csv"),
            "--tune",
            "train.wd",
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and "train.wd" in err and err.count("\n") == 1


def test_warmup_fractions_are_steps_of_the_arms_budget_even_on_a_segment():
    # a halving segment stops at its rung (D 250) but trains the warmup of a run to the arm's
    # budget (1000 tokens = 10 steps of 100): 0.2 is 2 steps there, as is a warmup written as 2
    runs = pd.DataFrame(
        {
            "arm": ["x", "x", "x"],
            "variant": "a",
            "N": 1.0,
            "D": [250.0, 1000.0, 1000.0],
            "train.batch_tokens": 100,
            "train.warmup": [0.2, 0.2, 2.0],
            "loss": 1.0,
        }
    )
    assert tuning_check.warmup_in_steps(runs)["train.warmup"].tolist() == [2.0, 2.0, 2.0]


def test_an_arm_whose_choice_the_grid_lacks_is_listed_not_ranked(tmp_path, capsys):
    _grid_csv(tmp_path / "grid.csv")
    grid = pd.read_csv(tmp_path / "grid.csv")
    grid = grid[~((grid["variant"] == "b") & (grid["train.lr"] == 4e-3))]  # b chose 4e-3
    grid.to_csv(tmp_path / "grid.csv", index=False)
    _tuned_csv(tmp_path / "tuned.csv")
    argv = [
        "--tuned",
        str(tmp_path / "tuned.csv"),
        "--grid",
        str(tmp_path / "grid.csv"),
        "--tune",
        "train.lr",
    ]
    assert tuning_check.main(argv) == 0
    out = capsys.readouterr().out
    assert "at 1 of 1 arms" in out
    assert "b N=300 D=1000 (the grid has no run at halving's choice 0.004)" in out
