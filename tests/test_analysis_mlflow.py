"""MLflow loader round trip against runs logged here with the schema of docs/contracts.md."""

import argparse
import json

import numpy as np
import pandas as pd
import pytest
from mlflow import MlflowClient
from mlflow.entities import Metric, Param, RunTag

from analysis.data.load import InputError, load_curves, load_mlflow
from analysis.data.select import load_selected
from analysis.data.synthetic import isoflop_runs
from analysis.fits.laws.chinchilla import Parametric
from analysis.report import cli as report

LAW = Parametric(E=1.8, A=480.0, B=1200.0, alpha=0.36, beta=0.30)


def _log_run(
    client, exp_id, parent, row, seed, status="FINISHED", final=True, sweep="iso", extra=None
):
    N, D = int(row.N), int(row.D)
    params = {
        **(extra or {}),
        "n_params_nonembed": N,
        "n_params": N + 4096,
        "n_params_embed": 4096,
        "tokens": D,
        "flops_6nd": 6 * N * D,
        "flops_exact": 7 * N * D,
        "train.seed": seed,
        "model.d_model": 64,
        "model.norm": "rmsnorm",
    }
    key = f"key-{row.run_id}" + (f"-seed{seed}" if seed else "")  # the seed is in the key
    tags = {
        "arch": "pre-rmsnorm-rope",
        "run_key": key,
        "variant": row.variant,
        "sweep": sweep,
        "mlflow.parentRunId": parent,
    }
    run = client.create_run(exp_id, tags=tags)
    steps = np.linspace(D / 4, D, 4).astype(int)
    metrics = [Metric("val_loss", row.loss * (1 + 0.1 * (D - s) / D), 0, int(s)) for s in steps]
    metrics += [Metric("train_loss", row.loss, 0, int(s)) for s in steps]
    if final:
        metrics.append(Metric("final_val_loss", row.loss, 0, D))
    client.log_batch(
        run.info.run_id, metrics=metrics, params=[Param(k, str(v)) for k, v in params.items()]
    )
    if status == "FAILED":
        client.log_batch(run.info.run_id, tags=[RunTag("failure_reason", "OOM at step 3")])
    client.set_terminated(run.info.run_id, status)
    return run.info.run_id


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    uri = f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlruns.db'}"
    client = MlflowClient(tracking_uri=uri)
    exp_id = client.create_experiment("iso")  # created once, before any run
    client.create_experiment("empty")
    parent = client.create_run(exp_id, tags={"mlflow.runName": "sweep-parent"}).info.run_id
    runs = isoflop_runs(LAW, budgets=(1e17, 1e18, 1e19), sizes_per_budget=3, noise=0.005)
    ids = [_log_run(client, exp_id, parent, r, seed=0) for r in runs.itertuples()]
    failed = _log_run(client, exp_id, parent, runs.iloc[0], 1, status="FAILED", final=False)
    other = client.create_run(exp_id).info.run_id  # another parent's child: not in the sweep
    _log_run(client, exp_id, other, runs.iloc[1], 2)
    return {"uri": uri, "parent": parent, "ids": ids, "failed": failed, "truth": runs}


def test_loader_round_trip(store):
    loaded = load_mlflow("iso", sweep=store["parent"], tracking_uri=store["uri"])
    df, truth = loaded.frame, store["truth"]
    assert sorted(df["run_id"]) == sorted(store["ids"])
    assert list(loaded.excluded["run_id"]) == [store["failed"]]
    assert loaded.excluded["reason"].iloc[0] == "OOM at step 3"
    merged = df.assign(key=df["run_key"].str[4:]).merge(truth, left_on="key", right_on="run_id")
    np.testing.assert_allclose(merged["loss_x"], merged["loss_y"], rtol=1e-12)
    np.testing.assert_allclose(merged["N_x"], merged["N_y"].astype(int))
    np.testing.assert_allclose(merged["C_x"], 6 * merged["N_x"] * merged["D_x"])
    np.testing.assert_allclose(df["N_total"] - df["N"], 4096)
    assert set(df.columns) >= {
        "run_id",
        "run_key",
        "arch",
        "variant",
        "seed",
        "N",
        "N_total",
        "D",
        "C",
        "C_exact",
        "loss",
        "model.d_model",
        "model.norm",
    }
    assert (df["seed"] == 0).all() and (df["model.d_model"] == 64).all()
    whole = load_mlflow("iso", tracking_uri=store["uri"]).frame  # no sweep: every training run
    assert len(whole) == len(df) + 1


def test_curves_are_loaded_by_run(store):
    curves = load_curves(store["ids"][:2], store["uri"])
    # the dense export: every logged step, NaN where a metric was not logged (no lr here)
    assert list(curves.columns) == ["run_id", "tokens", "val_loss", "train_loss", "lr"]
    assert curves["lr"].isna().all() and curves["train_loss"].notna().all()
    assert len(curves) == 8 and curves.groupby("run_id")["tokens"].is_monotonic_increasing.all()


def test_empty_or_unknown_experiment_lists_existing_ones(store):
    with pytest.raises(InputError, match=r"'empty' has no FINISHED.*\['Default', 'empty', 'iso'\]"):
        load_mlflow("empty", tracking_uri=store["uri"])
    with pytest.raises(InputError, match=r"no experiment named 'nope'; existing: \["):
        load_mlflow("nope", tracking_uri=store["uri"])


def test_report_from_mlflow_then_from_its_export(store, tmp_path):
    out, again = tmp_path / "r", tmp_path / "again"
    common = ["--bootstrap", "20", "--title", "iso"]
    args = ["--experiment", "iso", "--sweep", store["parent"], "--tracking-uri", store["uri"]]
    assert report.main([*args, *common, "--out", str(out)]) == 0
    assert (out / "curves.csv").exists() and (out / "figures" / "training_curves.svg").exists()
    assert "OOM at step 3" in (out / "report.md").read_text()
    fit = json.loads((out / "fit.json").read_text())
    assert fit["n_runs"] == 9 and fit["isoflop"]["n_budgets"] == 3
    regen = ["--csv", str(out / "runs.csv"), "--curves", str(out / "curves.csv")]
    assert report.main([*regen, *common, "--out", str(again)]) == 0
    assert (again / "fit.json").read_bytes() == (out / "fit.json").read_bytes()


# ---------------------------------------------------------------- several experiments and sweeps


@pytest.fixture(scope="module")
def two_experiments(tmp_path_factory):
    """An IsoFLOP sweep in experiment 'ladder' and a fixed-size token grid (two sweeps of it,
    one per size) in experiment 'grid', as sweeps.run logs them (parent runs tagged
    sweep_parent); the grid's middle column has the C of the ladder's 1e18 budget."""
    uri = f"sqlite:///{tmp_path_factory.mktemp('mlflow2') / 'mlruns.db'}"
    client = MlflowClient(tracking_uri=uri)
    ladder_id, grid_id = client.create_experiment("ladder"), client.create_experiment("grid")
    ladder = isoflop_runs(LAW, budgets=(1e17, 1e18, 1e19), sizes_per_budget=3, noise=0.005)
    iso = client.create_run(ladder_id, tags={"sweep_parent": "iso"}).info.run_id
    ids = {"iso": [_log_run(client, ladder_id, iso, r, 0) for r in ladder.itertuples()]}
    n_opt = LAW.optimal(1e18)[0][0]
    parents = {}
    for k, N in enumerate((n_opt / 2, 2 * n_opt)):
        name = f"grid{k}"
        parents[name] = client.create_run(grid_id, tags={"sweep_parent": name}).info.run_id
        D = np.array([0.25, 1.0, 4.0]) * 1e18 / (6 * N)
        rows = pd.DataFrame(
            {
                "run_id": [f"g{k}{j}" for j in range(3)],
                "variant": "base",
                "N": N,
                "D": D,
                "loss": LAW.predict(N, D),
            }
        )
        ids[name] = [
            _log_run(client, grid_id, parents[name], r, 0, sweep="grid") for r in rows.itertuples()
        ]
    return {"uri": uri, "iso": iso, **{f"{k}_parent": v for k, v in parents.items()}, "ids": ids}


def _select(store, experiments, sweeps=None):
    ns = argparse.Namespace(
        csv=None, experiment=experiments, sweep=sweeps, tracking_uri=store["uri"]
    )
    return load_selected(ns)


def test_each_sweep_is_found_in_the_experiment_that_holds_it(two_experiments):
    s = two_experiments
    loaded = _select(s, ["ladder", "grid"], [s["grid1_parent"], s["iso"]])
    assert sorted(loaded.frame["run_id"]) == sorted(s["ids"]["iso"] + s["ids"]["grid1"])
    assert loaded.source == (
        f"experiment 'ladder', sweep parent run {s['iso']} + "
        f"experiment 'grid', sweep parent run {s['grid1_parent']}"
    )
    # An experiment holding none of the given sweeps contributes all its runs.
    loaded = _select(s, ["ladder", "grid"], [s["iso"]])
    assert sorted(loaded.frame["run_id"]) == sorted(sum(s["ids"].values(), []))
    assert set(loaded.frame["source"]) == {
        f"experiment 'ladder', sweep parent run {s['iso']}",
        "experiment 'grid'",
    }
    whole = _select(s, ["grid", "ladder"]).frame  # whole experiments, in the order given
    assert list(whole["sweep"]) == ["grid"] * 6 + ["iso"] * 9


def test_a_sweep_no_selected_experiment_holds_is_an_error(two_experiments):
    s = two_experiments
    with pytest.raises(
        InputError,
        match=f"--sweep {s['iso']}: no run with this id in the "
        r"selected experiment\(s\) \['grid'\]",
    ):
        _select(s, ["grid"], [s["grid0_parent"], s["iso"]])
    with pytest.raises(InputError, match="--sweep nope: no run with this id"):
        _select(s, ["ladder", "grid"], ["nope"])
    with pytest.raises(InputError, match="--experiment ladder is given more than once"):
        _select(s, ["ladder", "ladder"])


def test_report_over_two_experiments(two_experiments, tmp_path):
    """The grid's runs at the ladder's 1e18 compute stay out of its IsoFLOP budget; approach 3
    uses every run; curves are read from both experiments; the export regenerates the fit."""
    s = two_experiments
    out, again = tmp_path / "r", tmp_path / "again"
    common = ["--bootstrap", "20", "--title", "two", "--holdout-above", "1e30"]
    args = [
        "--experiment",
        "ladder",
        "--experiment",
        "grid",
        "--sweep",
        s["iso"],
        "--tracking-uri",
        s["uri"],
    ]
    assert report.main([*args, *common, "--out", str(out)]) == 0
    fit = json.loads((out / "fit.json").read_text())
    assert fit["n_runs"] == 15 and fit["parametric"]["n_points"] == 15
    assert fit["isoflop"]["n_budgets"] == 3
    assert [o["n_points"] for o in fit["isoflop"]["per_budget"]] == [3, 3, 3]
    md = (out / "report.md").read_text()
    assert f"Sources: experiment 'ladder', sweep parent run {s['iso']} (9 runs); " in md
    assert "experiment 'grid' (6 runs). Runs per sweep: iso 9, grid 6." in md
    assert pd.read_csv(out / "curves.csv")["run_id"].nunique() == 15
    regen = ["--csv", str(out / "runs.csv"), "--curves", str(out / "curves.csv")]
    assert report.main([*regen, *common, "--out", str(again)]) == 0
    for name in ("fit.json", "report.md", "report.html", "runs.csv", "figures/isoflop.svg"):
        assert (again / name).read_bytes() == (out / name).read_bytes(), name


def test_sweep_selects_the_runs_of_its_latest_plan(tmp_path):
    """A sweep rerun after its axes changed keeps its parent: the report must read the points of
    the current plan (also one trained by another sweep, which sweeps.run does not retrain),
    not every child the parent ever had."""
    uri = f"sqlite:///{tmp_path / 'mlruns.db'}"
    client = MlflowClient(tracking_uri=uri)
    exp_id = client.create_experiment("plan", artifact_location=(tmp_path / "art").as_uri())
    runs = isoflop_runs(LAW, budgets=(1e17, 1e18, 1e19), sizes_per_budget=3, noise=0.005)
    parent = client.create_run(exp_id, tags={"sweep_parent": "demo"}).info.run_id
    other = client.create_run(exp_id, tags={"sweep_parent": "older"}).info.run_id
    stale, kept, elsewhere = runs.iloc[:2], runs.iloc[2:5], runs.iloc[5]
    for r in stale.itertuples():  # the first plan's points, no longer planned
        _log_run(client, exp_id, parent, r, 0)
    retried = _log_run(client, exp_id, parent, kept.iloc[0], 0, status="FAILED", final=False)
    kept_ids = [_log_run(client, exp_id, parent, r, 0) for r in kept.itertuples()]
    elsewhere_id = _log_run(client, exp_id, other, elsewhere, 0)
    failed_only = _log_run(client, exp_id, parent, runs.iloc[6], 0, status="FAILED", final=False)
    plan = pd.DataFrame(
        {"run_key": [f"key-{r}" for r in [*kept.run_id, elsewhere.run_id, runs.iloc[6].run_id]]}
    )
    plan.to_csv(tmp_path / "plan.csv", index=False)
    client.log_artifact(parent, str(tmp_path / "plan.csv"))

    loaded = load_mlflow("plan", sweep=parent, tracking_uri=uri)
    assert sorted(loaded.frame["run_id"]) == sorted([*kept_ids, elsewhere_id])
    assert list(loaded.excluded["run_id"]) == [failed_only]  # the FINISHED retry supersedes
    assert retried not in set(loaded.excluded["run_id"])


def test_without_sweep_a_rerun_counts_once_and_d_is_what_was_trained(tmp_path):
    """A rerun of a run key (train.resume=false) is one row, the latest FINISHED run; D and C
    are the tokens trained (whole batches), also from stores that logged only the budget."""
    uri = f"sqlite:///{tmp_path / 'mlruns.db'}"
    client = MlflowClient(tracking_uri=uri)
    exp_id = client.create_experiment("trained")
    N, fpt = 30_000, 250_000.0  # non-embedding params, exact FLOPs per token

    def run(key, start, loss, **params):
        run_id = client.create_run(exp_id, start_time=start, tags={"run_key": key}).info.run_id
        params = {"n_params_nonembed": N, "n_params": N + 4096, "tokens": 500_000, **params}
        client.log_batch(
            run_id,
            metrics=[Metric("final_val_loss", loss, 0, 0)],
            params=[Param(k, str(v)) for k, v in params.items()],
        )
        client.set_terminated(run_id, "FINISHED")
        return run_id

    new = {
        "tokens_trained": 500_736,
        "flops_6nd": 6 * N * 500_736,
        "flops_exact": fpt * 500_736,
        "flops_per_token_exact": fpt,
    }
    old = {
        "steps": 489,
        "batch_tokens": 1024,
        "flops_exact": fpt * 500_000,
        "flops_per_token_exact": fpt,
    }
    first = run("k-new", 1000, 2.6, **new)
    rerun = run("k-new", 2000, 2.5, **new)
    older_store = run("k-old", 1000, 2.7, **old)
    budget_only = run("k-budget", 1000, 2.8)
    df = load_mlflow("trained", tracking_uri=uri).frame.set_index("run_id")
    assert first not in df.index and sorted(df.index) == sorted([rerun, older_store, budget_only])
    assert df.loc[rerun, "loss"] == 2.5
    assert df.loc[rerun, "D"] == df.loc[older_store, "D"] == 500_736  # 489 batches of 1024
    assert df.loc[budget_only, "D"] == 500_000  # nothing else logged: the budget
    np.testing.assert_allclose(df["C"], 6 * N * df["D"])
    assert df.loc[rerun, "C_exact"] == df.loc[older_store, "C_exact"] == fpt * 500_736


def test_a_moe_run_is_counted_by_its_active_parameters(tmp_path):
    """A MoE run's N is what one token passes through (C = 6 N_active D, as its flops_6nd),
    with its every-expert count kept in N_nonembed_total; a dense run's columns are as before;
    `--params total` counts every parameter of both."""
    from analysis.data.load import with_total_params

    uri = f"sqlite:///{tmp_path / 'mlruns.db'}"
    client = MlflowClient(tracking_uri=uri)
    exp_id = client.create_experiment("moe")
    D = 500_736
    counts = {"dense": (30_000, 30_000, 34_096), "moe": (80_000, 31_000, 84_096)}
    for key, (nonembed, active, total) in counts.items():
        run_id = client.create_run(exp_id, tags={"run_key": key}).info.run_id
        params = {
            "n_params_nonembed": nonembed,
            "n_params_nonembed_active": active,
            "n_params": total,
            "tokens_trained": D,
            "flops_6nd": 6 * active * D,
        }
        client.log_batch(
            run_id,
            metrics=[Metric("final_val_loss", 3.0, 0, 0)],
            params=[Param(k, str(v)) for k, v in params.items()],
        )
        client.set_terminated(run_id, "FINISHED")
    df = load_mlflow("moe", tracking_uri=uri).frame.set_index("run_key")
    assert df.loc["moe", "N"] == 31_000 and df.loc["dense", "N"] == 30_000
    assert df.loc["moe", "N_nonembed_total"] == 80_000 and np.isnan(
        df.loc["dense", "N_nonembed_total"]
    )
    np.testing.assert_allclose(df["C"], 6 * df["N"] * D)  # k = 1: no factor column
    assert "k" not in df.columns
    total = with_total_params(df)
    np.testing.assert_allclose(total["C"], 6 * np.array([34_096, 84_096]) * D)


def test_budget_convention_comes_from_the_parents_plan_also_without_sweep(tmp_path):
    """An IsoFLOP sweep planned in exact FLOPs says so in its plan.csv (budget_flops): the runs
    carry it with --sweep and with only --experiment (every parent's plan is read), so
    approach 2 under --compute exact does not depend on naming the sweep."""
    uri = f"sqlite:///{tmp_path / 'mlruns.db'}"
    client = MlflowClient(tracking_uri=uri)
    exp_id = client.create_experiment("planned-exact")
    runs = isoflop_runs(LAW, budgets=(1e17, 1e18), sizes_per_budget=3, noise=0.005)
    parents, ids = [], []
    for half, convention in ((runs.iloc[:3], "exact"), (runs.iloc[3:], "6nd")):  # two sweeps
        parent = client.create_run(exp_id, tags={"mlflow.runName": "sweep-parent"}).info.run_id
        ids += [_log_run(client, exp_id, parent, r, seed=0) for r in half.itertuples()]
        plan = pd.DataFrame(
            {"run_key": [f"key-{r}" for r in half.run_id], "budget_flops": convention}
        )
        plan.to_csv(tmp_path / "plan.csv", index=False)
        client.log_artifact(parent, str(tmp_path / "plan.csv"))
        parents.append(parent)
    whole = load_mlflow("planned-exact", tracking_uri=uri).frame
    assert sorted(whole["run_id"]) == sorted(ids)
    by_key = dict(zip(whole["run_key"], whole["budget_flops"]))
    assert by_key == {
        **{f"key-{r}": "exact" for r in runs.run_id[:3]},
        **{f"key-{r}": "6nd" for r in runs.run_id[3:]},
    }
    one = load_mlflow("planned-exact", sweep=parents[0], tracking_uri=uri).frame
    assert len(one) == 3 and (one["budget_flops"] == "exact").all()


def test_the_corpus_unigram_entropy_is_a_column(tmp_path):
    """`data_unigram_entropy` (nats/token, logged by training) becomes runs.csv's
    `unigram_entropy`; a run logged before it existed has none (NaN)."""
    uri = f"sqlite:///{tmp_path / 'mlruns.db'}"
    client = MlflowClient(tracking_uri=uri)
    exp_id = client.create_experiment("iso")
    parent = client.create_run(exp_id).info.run_id
    runs = isoflop_runs(LAW, budgets=(1e17,), sizes_per_budget=2, noise=0.0)
    new = _log_run(
        client, exp_id, parent, runs.iloc[0], 0, extra={"data_unigram_entropy": 5.955533313600933}
    )
    old = _log_run(client, exp_id, parent, runs.iloc[1], 0)
    df = load_mlflow("iso", sweep=parent, tracking_uri=uri).frame.set_index("run_id")
    assert df.loc[new, "unigram_entropy"] == 5.955533313600933
    assert np.isnan(df.loc[old, "unigram_entropy"])
