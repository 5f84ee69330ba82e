"""MLflow loader round trip against runs logged here with the schema of docs/contracts.md."""

import json

import numpy as np
import pytest
from mlflow import MlflowClient
from mlflow.entities import Metric, Param, RunTag

from analysis import report
from analysis.chinchilla import Parametric
from analysis.load import InputError, load_curves, load_mlflow
from analysis.synthetic import isoflop_runs

LAW = Parametric(E=1.8, A=480.0, B=1200.0, alpha=0.36, beta=0.30)


def _log_run(client, exp_id, parent, row, seed, status="FINISHED", final=True):
    N, D = int(row.N), int(row.D)
    params = {"n_params_nonembed": N, "n_params": N + 4096, "n_params_embed": 4096, "tokens": D,
              "flops_6nd": 6 * N * D, "flops_exact": 7 * N * D, "train.seed": seed,
              "model.d_model": 64, "model.norm": "rmsnorm"}  # fmt: skip
    tags = {"arch": "pre-rmsnorm-rope", "run_key": f"key-{row.run_id}", "variant": row.variant,
            "sweep": "iso", "mlflow.parentRunId": parent}  # fmt: skip
    run = client.create_run(exp_id, tags=tags)
    steps = np.linspace(D / 4, D, 4).astype(int)
    metrics = [Metric("val_loss", row.loss * (1 + 0.1 * (D - s) / D), 0, int(s)) for s in steps]
    metrics += [Metric("train_loss", row.loss, 0, int(s)) for s in steps]
    if final:
        metrics.append(Metric("final_val_loss", row.loss, 0, D))
    client.log_batch(run.info.run_id, metrics=metrics,
                     params=[Param(k, str(v)) for k, v in params.items()])  # fmt: skip
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
    assert set(df.columns) >= {"run_id", "run_key", "arch", "variant", "seed", "N", "N_total",
                               "D", "C", "C_exact", "loss", "model.d_model", "model.norm"}  # fmt: skip
    assert (df["seed"] == 0).all() and (df["model.d_model"] == 64).all()
    whole = load_mlflow("iso", tracking_uri=store["uri"]).frame  # no sweep: every training run
    assert len(whole) == len(df) + 1


def test_curves_are_loaded_by_run(store):
    curves = load_curves(store["ids"][:2], store["uri"])
    assert list(curves.columns) == ["run_id", "tokens", "val_loss"]
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
