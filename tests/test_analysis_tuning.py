"""Tuned sweeps in analysis: per-arm selection, the grid's edges, the lr rule, epochs, the report.

The runs come from a known loss surface: L(N, D) of a Chinchilla law plus a bowl in log lr,
    loss = law(N, D) + CURVATURE * ln(lr / lr_opt)^2,  lr_opt = SCALE * N^EXPONENT * exp(jitter),
so every arm's best grid value, its optimum and the rule's exponent are known.
"""

import json

import numpy as np
import pandas as pd
import pytest

from analysis.data.load import InputError
from analysis.fits import cli as fit_cli
from analysis.fits import fit
from analysis.fits.laws.chinchilla import Parametric
from analysis.report import cli as report
from analysis.tuning import arms as tuning
from analysis.tuning import tuning_report

LAW = Parametric(E=1.8, A=480.0, B=1200.0, alpha=0.36, beta=0.30)
SCALE, EXPONENT, CURVATURE = 2.0, -0.35, 0.05
SIZES, TOKENS = (1e6, 3e6, 1e7, 3e7, 1e8), (2e8, 2e9)
GRID = np.geomspace(1 / 8, 8, 7)  # lr grid around each size's rule value, factors of 2


def lr_opt(N, shift=1.0):
    return shift * SCALE * N**EXPONENT


def tuned_runs(seed=0, noise=0.0005, jitter=0.1, variant="base", shift=1.0, seeds=1, grid=GRID):
    """A full grid: every size x budget x lr (x seed), loss from the known surface."""
    rng = np.random.default_rng(seed)
    rows = []
    for N in SIZES:
        for D in TOKENS:
            opt = lr_opt(N, shift) * np.exp(jitter * rng.standard_normal())
            for f in grid:
                lr = float(f"{lr_opt(N) * f:.4g}")
                for s in range(seeds):
                    loss = float(LAW.predict(N, D)) + CURVATURE * np.log(lr / opt) ** 2
                    rows.append(
                        {
                            "run_id": f"{variant}-{len(rows):03d}",
                            "variant": variant,
                            "seed": s,
                            "N": N,
                            "D": D,
                            "loss": loss * np.exp(noise * rng.standard_normal()),
                            "train.lr": lr,
                        }
                    )
    return pd.DataFrame(rows)


def _fit(tmp_path, runs, *extra):
    tmp_path.mkdir(exist_ok=True)
    path = tmp_path / "runs.csv"
    runs.to_csv(path, index=False)
    out = tmp_path / "fit.json"
    assert fit_cli.main(["--csv", str(path), "--bootstrap", "20", *extra, "--out", str(out)]) == 0
    return json.loads(out.read_text())


def test_each_arm_keeps_its_lowest_loss_run_and_every_law_is_fitted_to_those(tmp_path):
    runs = tuned_runs(seed=1)
    res = _fit(tmp_path, runs, "--tune", "train.lr")
    t = res["tuning"]
    assert t["keys"] == ["train.lr"] and t["n_arms"] == len(SIZES) * len(TOKENS) == 10
    assert res["parametric"]["n_points"] == res["n_runs"] == 10  # arms, not the 70 runs
    for arm in t["arms"]:
        cell = runs[(runs["N"] == arm["N"]) & (runs["D"] == arm["D"])]
        lowest = cell.loc[cell["loss"].idxmin()]
        assert arm["selected"] == [lowest["run_id"]]
        assert arm["best"] == {"train.lr": lowest["train.lr"]}
        assert len(arm["losses"]) == len(GRID)
        assert arm["losses"][tuning.value_text(lowest["train.lr"])] == lowest["loss"]
        assert arm["at_edge"] is False  # the truth sits mid-grid
    # the laws saw the selected runs only: the extrapolation check lists them by id
    selected = {a["selected"][0] for a in t["arms"]}
    assert {r["run_id"] for r in res["extrapolation"]["runs"]} <= selected
    assert res["extrapolation"]["n_train"] + res["extrapolation"]["n_test"] == 10


def test_seeds_are_averaged_before_choosing_and_the_best_value_keeps_all_its_seeds(tmp_path):
    runs = tuned_runs(seed=2, seeds=2, noise=0.002)
    selected, section = tuning.select(runs, ["train.lr"])
    assert len(selected) == 2 * section["n_arms"]
    for arm in section["arms"]:
        cell = runs[(runs["N"] == arm["N"]) & (runs["D"] == arm["D"])]
        means = cell.groupby("train.lr")["loss"].mean()
        assert arm["best"]["train.lr"] == means.idxmin()
        assert len(arm["selected"]) == 2


def test_an_optimum_beyond_the_grid_is_flagged_at_its_edge(tmp_path):
    # the 'slow' variant's optimum sits 20x below the rule value: beyond the grid's 1/8
    runs = pd.concat([tuned_runs(seed=3), tuned_runs(seed=4, variant="slow", shift=1 / 20)])
    _, section = tuning.select(runs, ["train.lr"])
    for arm in section["arms"]:
        assert arm["at_edge"] is (arm["variant"] == "slow")
        if arm["variant"] == "slow":
            assert arm["edge"] == {"train.lr": "lowest"}
            assert arm["best"]["train.lr"] == min(arm["grid"]["train.lr"])


def test_runs_stopped_early_are_candidates_never_an_arms_result():
    """Successive halving: per arm the 4 worst values stop at 1/4 of the budget; only
    full-length runs compete for the arm's result."""
    full = tuned_runs(seed=5)
    rows = []
    for (N, D), cell in full.groupby(["N", "D"]):
        cell = cell.assign(arm=f"N={N:.0e} D={D:.0e}")  # the sweep's arm tag
        worst = cell.nlargest(4, "loss")
        # stopped at a quarter of the tokens, with a loss below every full run's (a halving
        # loser can look better than a long run; it must still not be the arm's result)
        rows.append(
            worst.assign(
                D=D / 4, loss=cell["loss"].min() - 0.5, run_id=worst["run_id"] + "-stopped"
            )
        )
        rows.append(cell.drop(worst.index))
    runs = pd.concat(rows, ignore_index=True)
    selected, section = tuning.select(runs, ["train.lr"])
    assert section["n_arms"] == 10 and section["n_stopped_early"] == 40
    assert not selected["run_id"].str.endswith("stopped").any()
    for arm in section["arms"]:
        assert len(arm["stopped_early"]) == 4 and len(arm["losses"]) == len(GRID) - 4
        assert all(s["D"] == arm["D"] / 4 for s in arm["stopped_early"])
        assert len(arm["grid"]["train.lr"]) == len(GRID)  # the grid counts the stopped values
    # the summary says the choice is halving's, unchecked against a full grid; a grid says nothing
    said = " ".join(tuning_report.summary_sentences(section, None))
    assert "chosen by successive halving (40 candidate segments stopped early)" in said
    plain = " ".join(tuning_report.summary_sentences(tuning.select(full, ["train.lr"])[1], None))
    assert "successive halving" not in plain
    # curve-aware tuning's prefixes carry their budget (tag tune_budget): the summary says so
    curve = runs.assign(tune_budget=np.where(runs["run_id"].str.endswith("stopped"), 1.0, np.nan))
    said = " ".join(tuning_report.summary_sentences(tuning.select(curve, ["train.lr"])[1], None))
    assert "chosen from partial curves (sweep.tune_curve: 40 candidate prefixes" in said
    assert "successive halving" not in said


def test_lr_rule_recovers_the_power_law_with_an_interval_covering_it():
    _, section = tuning.select(tuned_runs(seed=3), ["train.lr"])
    rule = tuning.lr_rule(section, 1000, 0)
    assert rule["key"] == "train.lr" and rule["variable"] == "N" and rule["n_arms"] == 10
    lo, hi = rule["ci95"]["exponent"]
    assert lo < EXPONENT < hi and abs(rule["exponent"] - EXPONENT) < 0.05
    lo, hi = rule["ci95"]["scale"]
    assert lo < SCALE < hi
    assert rule["not_identified"] == []
    # in C = 6 N D with two budgets per size: a rule exists, its exponent is its own
    assert rule["in_C"]["variable"] == "C" and np.isfinite(rule["in_C"]["exponent"])


def test_lr_rule_from_too_few_sizes_or_at_the_edge_is_not_identified():
    two_sizes = tuned_runs(seed=6)
    two_sizes = two_sizes[two_sizes["N"].isin(SIZES[:2])]
    _, section = tuning.select(two_sizes, ["train.lr"])
    rule = tuning.lr_rule(section, 100, 0)
    assert set(rule["not_identified"]) == {"scale", "exponent"}
    assert "2 distinct N" in rule["why_not_identified"]["exponent"]
    # every arm's optimum beyond the grid: each gives only a bound, none enters the rule
    _, section = tuning.select(tuned_runs(seed=7, shift=1 / 20), ["train.lr"])
    rule = tuning.lr_rule(section, 100, 0)
    assert rule["n_arms"] == 0 and len(rule["left_out"]) == 10
    assert "exponent" in rule["not_identified"]


def test_lr_rule_from_noise_has_a_huge_interval_and_is_not_identified():
    # optima that scatter by a factor e^1.5 per arm around a flat rule
    _, section = tuning.select(
        tuned_runs(seed=8, jitter=1.5, grid=np.geomspace(1 / 64, 64, 13)), ["train.lr"]
    )
    rule = tuning.lr_rule(section, 200, 0)
    lo, hi = rule["ci95"]["exponent"]
    assert hi - lo > 1.0 and "wider than 1" in rule["why_not_identified"]["exponent"]


def test_bad_tune_keys_fail_with_one_line_naming_them(tmp_path, capsys):
    runs = tuned_runs(seed=9)
    with pytest.raises(InputError, match="--tune train.warmup: no column 'train.warmup'"):
        tuning.select(runs, ["train.warmup"])
    with pytest.raises(InputError, match="given more than once"):
        tuning.select(runs, ["train.lr", "train.lr"])
    runs.loc[3, "train.lr"] = np.nan
    path = tmp_path / "runs.csv"
    runs.to_csv(path, index=False)
    assert (
        fit_cli.main(["--csv", str(path), "--tune", "train.lr", "--out", str(tmp_path / "f.json")])
        == 2
    )
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "1 run(s) have no value of 'train.lr'" in err
    assert not (tmp_path / "f.json").exists()


def test_two_tuned_keys_choose_a_combination(tmp_path):
    runs = tuned_runs(seed=10)
    # warmup helps a little, best at 20 of (0, 20, 80): a second bowl in the loss
    runs = pd.concat(
        [
            runs.assign(
                **{"train.warmup": w},
                loss=runs["loss"] + 0.01 * (w - 20) ** 2 / 400,
                run_id=runs["run_id"] + f"-w{w}",
            )
            for w in (0, 20, 80)
        ],
        ignore_index=True,
    )
    _, section = tuning.select(runs, ["train.lr", "train.warmup"])
    for arm in section["arms"]:
        assert arm["best"]["train.warmup"] == 20 and not arm["at_edge"]
        assert len(arm["losses"]) == 3 * len(GRID)
        assert any(k.startswith("train.lr=") and "train.warmup=20" in k for k in arm["losses"])


def test_report_shows_the_tuning_section_curves_edges_and_epochs(tmp_path):
    runs = pd.concat([tuned_runs(seed=11), tuned_runs(seed=12, variant="slow", shift=1 / 20)])
    runs["data_train_tokens"] = 5e8  # the 2e9-token budget repeats the split 4 times
    path = tmp_path / "runs.csv"
    runs.to_csv(path, index=False)
    out = tmp_path / "report"
    assert (
        report.main(
            ["--csv", str(path), "--tune", "train.lr", "--bootstrap", "10", "--out", str(out)]
        )
        == 0
    )
    md = (out / "report.md").read_text()
    summary = md.split("## Summary")[1].split("\n## ")[0]
    assert "Tuned train.lr per arm: 20 arms" in summary
    assert (
        "10 of 20 arms have their best value at the edge" in summary and "widen the grid" in summary
    )
    assert "10 of 20 runs repeat their training data (up to 4.00 epochs" in summary
    tuning_md = md.split("## Tuning: train.lr per arm")[1].split("\n## ")[0]
    assert tuning_md.count("widen the grid (best at the lowest train.lr)") == 10
    assert (
        "![Final validation loss against train.lr" in tuning_md
        and "figures/tuning.png" in tuning_md
    )
    assert "Scaling rule for train.lr" in tuning_md
    runs_md = md.split("## Runs")[1].split("\n## ")[0]
    assert runs_md.count("| 4.00 |") == 10  # every selected run at 2e9 tokens, with its epochs
    assert (out / "figures" / "tuning.svg").is_file()
    html = (out / "report.html").read_text()
    assert "<h2>Tuning: train.lr per arm</h2>" in html and html.count("<svg") >= 2
    res = json.loads((out / "fit.json").read_text())
    assert res["tuning"]["n_arms"] == 20 and res["parametric"]["n_points"] == 10  # baseline arms
    assert res["lr_rule"]["n_arms"] == 10 and res["lr_rule"]["not_identified"] == []
    # runs.csv keeps every run of the grid, so the same arms are chosen again from it
    exported = pd.read_csv(out / "runs.csv")
    assert len(exported) == len(runs)
    assert json.loads(fit.dumps(tuning.select(exported, ["train.lr"])[1])) == res["tuning"]


def test_from_an_mlflow_store_arm_tags_train_params_and_epochs_are_read(tmp_path):
    """A tuned sweep as training logs it: `train.lr` a param, the sweep's `arm` and `tune_role`
    tags, the final `epochs` metric; a halving loser FINISHED with fewer tokens."""
    from mlflow import MlflowClient
    from mlflow.entities import Metric, Param, RunTag

    from analysis.data.load import load_mlflow

    uri = f"sqlite:///{tmp_path / 'mlruns.db'}"
    client = MlflowClient(tracking_uri=uri)
    exp_id = client.create_experiment("tuned")
    runs = tuned_runs(seed=13, grid=np.geomspace(1 / 4, 4, 5))
    runs = runs[runs["N"].isin(SIZES[:3])]
    losers = set(runs.groupby(["N", "D"])["loss"].idxmax())  # per arm: stopped at D / 4
    for i, r in runs.iterrows():
        D = int(r.D / 4 if i in losers else r.D)
        params = {
            "n_params_nonembed": int(r.N),
            "tokens_trained": D,
            "train.lr": r["train.lr"],
            "train.seed": 0,
            "model.d_model": 64,
        }
        tags = {
            "run_key": r.run_id,
            "variant": "base",
            "arm": f"N{r.N:.0e}-D{r.D:.0e}",
            "tune_role": "candidate",
        }
        run_id = client.create_run(exp_id).info.run_id
        client.log_batch(
            run_id,
            params=[Param(k, str(v)) for k, v in params.items()],
            tags=[RunTag(k, v) for k, v in tags.items()],
            metrics=[
                Metric("final_val_loss", r.loss - (1 if i in losers else 0), 0, D),
                Metric("epochs", D / 1e9, 0, D),
            ],
        )
        client.set_terminated(run_id, "FINISHED")
    frame = load_mlflow("tuned", tracking_uri=uri).frame
    assert {"train.lr", "arm", "tune_role", "epochs"} <= set(frame.columns)
    assert frame["epochs"].max() == pytest.approx(2.0)
    out = tmp_path / "fit.json"
    assert (
        fit_cli.main(
            [
                "--experiment",
                "tuned",
                "--tracking-uri",
                uri,
                "--tune",
                "train.lr",
                "--bootstrap",
                "10",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    res = json.loads(out.read_text())
    t = res["tuning"]
    assert t["n_arms"] == 6 and t["n_stopped_early"] == 6 and res["parametric"]["n_points"] == 6
    for arm in t["arms"]:
        cell = runs[(runs["N"] == arm["N"]) & (runs["D"] == arm["D"])].drop(
            index=list(losers), errors="ignore"
        )
        assert arm["best"]["train.lr"] == pytest.approx(cell.loc[cell["loss"].idxmin(), "train.lr"])
        assert arm["stopped_early"][0]["D"] == arm["D"] / 4


def test_each_groups_tuning_section_counts_only_its_own_runs(tmp_path):
    # two variants of different grid sizes fitted one law each (--group): a group's section
    # must count its own arms, runs and choices, not the whole sweep's
    a = tuned_runs(seed=2, variant="a")
    b = tuned_runs(seed=3, variant="b", grid=GRID[1:-1])
    res = _fit(
        tmp_path, pd.concat([a, b], ignore_index=True), "--tune", "train.lr", "--group", "variant"
    )
    arms = len(SIZES) * len(TOKENS)
    for name, runs in (("a", a), ("b", b)):
        t = res["groups"][name]["tuning"]
        assert (t["n_arms"], t["n_runs"], t["n_selected"]) == (arms, len(runs), arms)
        assert {r for arm in t["arms"] for r in arm["selected"]} <= set(runs["run_id"])


def test_a_tuned_key_is_read_as_the_grid_wrote_it_not_as_the_segment_ran_it(tmp_path):
    """Halving hands a fractional warmup to its segments as steps (0.02 of 489 steps -> 10), a
    transfer keeps the fraction: the analysis reads both from `tune_values`, one scale."""
    from mlflow import MlflowClient
    from mlflow.entities import Metric, Param, RunTag

    from analysis.data.load import load_mlflow

    uri = f"sqlite:///{tmp_path / 'mlruns.db'}"
    client = MlflowClient(tracking_uri=uri)
    exp_id = client.create_experiment("steps")
    logged = [
        ("candidate", 10, "train.lr=0.008,train.warmup=0.02", 2.9),
        ("candidate", 73, "train.lr=0.008,train.warmup=0.15", 2.8),
        ("transfer", 0.15, "train.lr=0.008,train.warmup=0.15", 2.5),
    ]
    for i, (role, warmup, values, loss) in enumerate(logged):
        run_id = client.create_run(exp_id).info.run_id
        params = {
            "n_params_nonembed": 30000,
            "tokens_trained": 500000 * (1 + 2 * (role == "transfer")),
            "train.warmup": warmup,
            "train.lr": 0.008,
        }
        tags = {
            "run_key": f"k{i}",
            "arm": "a" if role == "candidate" else "b",
            "tune_role": role,
            "tune_values": values,
        }
        client.log_batch(
            run_id,
            params=[Param(k, str(v)) for k, v in params.items()],
            tags=[RunTag(k, v) for k, v in tags.items()],
            metrics=[Metric("final_val_loss", loss, 0, 0)],
        )
        client.set_terminated(run_id, "FINISHED")
    frame = load_mlflow("steps", tracking_uri=uri).frame.sort_values("run_key")
    assert list(frame["train.warmup"]) == [0.02, 0.15, 0.15]
    assert list(frame["train.lr"]) == [0.008] * 3


def _arm(rows):
    cols = ["run_id", "arm", "tune_role", "seed", "loss", "train.lr"]
    return pd.DataFrame([dict(zip(cols, r)) for r in rows]).assign(variant="base", N=1e6, D=5e5)


def test_extra_seeds_of_a_chosen_value_are_its_result_not_more_candidates():
    """`sweep.seeds: 2` on a full grid: every candidate at seed 0, the chosen value also at seed
    1. Ranked on the seed every value has, the choice is the sweep's (a mean over the chosen
    value's two seeds would lose to the 2nd candidate's one); its result is both seeds."""
    runs = _arm(
        [
            ("c1", "a", "candidate", 0, 3.10, 1e-3),
            ("c2", "a", "chosen", 0, 3.00, 2e-3),
            ("c3", "a", "candidate", 0, 3.05, 4e-3),
            ("c2s1", "a", "chosen", 1, 3.20, 2e-3),  # seed 1 of the choice, unlucky
        ]
    )
    selected, section = tuning.select(runs, ["train.lr"])
    (arm,) = section["arms"]
    assert arm["best"] == {"train.lr": 2e-3} and sorted(arm["selected"]) == ["c2", "c2s1"]
    assert arm["losses"] == {"0.001": 3.10, "0.002": 3.00, "0.004": 3.05}
    assert sorted(selected["seed"]) == [0, 1]
    # halving: one full-length value (the winner's decay at seed 0, a full run at seed 1) and
    # segments stopped early: the value's loss is the mean over its seeds
    halving = _arm(
        [
            ("s1", "b", "candidate", 0, 3.40, 1e-3),
            ("s2", "b", "candidate", 0, 3.30, 2e-3),
            ("w0", "b", "chosen", 0, 3.00, 2e-3),
            ("w1", "b", "chosen", 1, 3.02, 2e-3),
        ]
    )
    halving.loc[halving["tune_role"] == "candidate", "D"] = 2.5e5
    (arm,) = tuning.select(halving, ["train.lr"])[1]["arms"]
    assert arm["losses"] == {"0.002": pytest.approx(3.01)} and arm["selected"] == ["w0", "w1"]
    assert len(arm["stopped_early"]) == 2
