"""Curve-aware tuning (`sweep.tune_curve`, `analysis.tuning.curve_tuning`, `analysis.tuning.tuning_check
--strategy curve`) and the dense curves it reads (train_loss and lr at every logged step)."""

from __future__ import annotations

import math
import re
import subprocess
import sys

import mlflow
import numpy as np
import pandas as pd
import pytest
from mlflow import MlflowClient
from mlflow.entities import Metric
from sweep_helpers import TINY, _corpus, _env, _tag, sweep_file, tuned_plan

from analysis.data.load import load_curves, val_points
from analysis.fits.laws.curve import TISSUE, features
from analysis.tuning import curve_check, curve_tuning, tuning_check
from analysis.tuning import curves as C
from analysis.tuning import schedule_replay as R
from sweeps import curve_tuning as sweeps_curve
from sweeps import plan, tuning_view
from sweeps.config import CurveSpec

BT = 64  # tokens per step of the synthetic runs


def _row(run_id, lr, tokens=BT * 600, **extra):
    return {
        "run_id": run_id,
        "variant": "v",
        "N": 1e5,
        "seed": 0,
        "train.lr": lr,
        "train.warmup": 0.05,
        "train.tokens": tokens,
        "train.batch_tokens": BT,
        "train.schedule": "wsd",
        "train.decay_fraction": 0.2,
        "train.min_lr_ratio": 0.1,
        "D": tokens,
        **extra,
    }


def test_dense_curves_round_trip_and_old_files_still_read(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlruns.db'}"
    client = MlflowClient(tracking_uri=uri)
    run_id = client.create_run(client.create_experiment("dense")).info.run_id
    steps = np.arange(1, 41)
    metrics = [Metric("train_loss", 7.0 - 0.05 * s, 0, int(s * BT)) for s in steps]
    metrics += [Metric("lr", 1e-3, 0, int(s * BT)) for s in steps]
    metrics += [Metric("val_loss", 6.9 - 0.05 * s, 0, int(s * BT)) for s in (20, 40)]
    client.log_batch(run_id, metrics=metrics)
    curves = load_curves([run_id], uri)
    assert list(curves.columns) == ["run_id", "tokens", "val_loss", "train_loss", "lr"]
    assert len(curves) == 40 and curves["val_loss"].notna().sum() == 2
    curves.to_csv(tmp_path / "curves.csv", index=False)
    back = pd.read_csv(tmp_path / "curves.csv")
    pd.testing.assert_frame_equal(back, curves, check_dtype=False)
    assert val_points(back)["tokens"].tolist() == [20 * BT, 40 * BT]
    # 2 val points a run: the laws fit the train loss, a point per step after s - 1 updates
    assert C.choose_metric(back) == "train_loss" and "train loss" in C.metric_note(
        back, "train_loss"
    )
    runs = pd.DataFrame([_row(run_id, 1e-3, tokens=40 * BT)])
    train = C.curves_of(runs, back, "train_loss")[run_id]
    assert train.steps.tolist() == list(range(1, 40)) and train.loss[0] == pytest.approx(6.9)
    # an old val-only curves.csv reads as before, and `auto` keeps its val loss
    old = back[["run_id", "tokens", "val_loss"]].dropna()
    assert C.choose_metric(old) == "val_loss"
    assert C.curves_of(runs, old)[run_id].steps.tolist() == [20, 40]
    pd.testing.assert_frame_equal(val_points(old), old.reset_index(drop=True))


def test_curve_strategy_plans_one_prefix_per_candidate_at_two_runs(comp, capsys):  # noqa: F811
    _, _, tp = tuned_plan(comp, [*TINY, "+sweep.tune_curve={rule: predicted, runs: 2}"])
    assert tp.spec.curve == CurveSpec(2.0, 0.2, "predicted")
    for arm in tp.arms:
        spent, grid, untuned, n_runs = tp.cost(arm)
        bt = arm.run.facts.batch_tokens
        # 8 t + (D - t) <= 2 D with t in whole batches
        assert arm.rungs == (int(arm.tokens / 7 // bt) * bt,)
        assert 2.0 - 8 * bt / arm.tokens < spent / untuned <= 2.0
        assert n_runs == 8 + 1 and grid == pytest.approx(8 * untuned)
    first = tp.first_stage()
    assert len(first) == 12 * 8 and {r.phase for r in first} == {"candidate"}
    assert "train.log_every=1" in first[0].overrides
    assert f"++tracking.tags.tune_budget={tp.arms[0].tokens}" in first[0].overrides
    tuning_view.print_tuning(tp, 2, lambda r: "llama")
    out = capsys.readouterr().out
    assert "curve law from a prefix, 2 runs per arm" in out
    assert re.search(r"a tuned arm costs (1\.9\d|2\.00) runs for 8 candidates", out)


@pytest.mark.parametrize(
    "extra,message",
    [
        ("+sweep.tune_curve={runs: 1}", "sweep.tune_curve.runs: expected more than 1"),
        ("+sweep.tune_curve={rungs: 2}", "sweep.tune_curve.rungs: unknown field"),
        ("+sweep.tune_curve={rule: best}", "sweep.tune_curve.rule: unknown rule 'best'"),
        ("+sweep.tune_halving=false", "remove sweep.tune_halving"),
        (
            "+sweep.tune_curve={rule: predicted, runs: 1.01}",
            "sweep.tune_curve.runs: arm .* a prefix of 0 tokens",
        ),
        (
            "+sweep.tune_curve={rule: predicted, runs: 1.3}",
            "see 0 train losses in their prefix .* needs 6",
        ),
        ("+sweep.tune_curve={runs: 1.01}", "sweep.tune_curve.runs: arm .* a prefix of 0 tokens"),
    ],
)
def test_bad_tune_curve_fails_naming_the_key(comp, extra, message):  # noqa: F811
    args = [*TINY, extra]
    if "tune_halving" in extra:
        args.append("+sweep.tune_curve={runs: 2}")
    with pytest.raises(plan.PlanError, match=message):
        tuned_plan(comp, args)


def _grid(lrs, floors, noise=2e-3, seed=0):
    """A full grid of one arm: each candidate's train loss at every step (and its final val
    loss) from the Tissue law with its own floor L0, plus relative noise."""
    rng = np.random.default_rng(seed)
    rows, points = [], []
    for i, (lr, floor) in enumerate(zip(lrs, floors)):
        row = _row(f"c{i}", lr, arm="arm0", tune_role="candidate")
        lrs_run = R.lrs_of(row)
        warm = R.warmup_steps(row["train.warmup"], lrs_run.size)
        theta = TISSUE.to_theta({"L0": floor, "A": 0.9, "alpha": 0.45, "C": 0.3})
        steps = np.arange(1, lrs_run.size + 1)
        # the loss logged at step s is of the model after s - 1 updates
        law = TISSUE.predict(theta, features("tissue", lrs_run, steps - 1, warm))[0]
        law[0] = TISSUE.predict(theta, features("tissue", lrs_run, [1], warm))[0, 0]
        row["loss"] = float(
            TISSUE.predict(theta, features("tissue", lrs_run, [steps[-1]], warm))[0, 0]
        )
        rows.append(row)
        noisy = law * np.exp(noise * rng.standard_normal(law.size))
        points.append(
            pd.DataFrame(
                {
                    "run_id": row["run_id"],
                    "tokens": steps * BT,
                    "val_loss": np.nan,
                    "train_loss": noisy,
                    "lr": lrs_run,
                }
            )
        )
    return pd.DataFrame(rows), pd.concat(points, ignore_index=True)


def test_offline_check_chooses_the_known_best_where_the_current_loss_does_not(tmp_path, capsys):
    # the highest lr leads at the end of the prefix, the next one ends best
    runs, points = _grid(lrs=(5e-4, 1e-3, 2e-3, 4e-3), floors=(3.3, 3.1, 2.9, 3.2))
    upto = curve_tuning.prefix_tokens(4, BT * 600, BT)
    assert upto == BT * 200  # 4 t + (D - t) = 2 D
    at_prefix = points[points["tokens"] == upto].set_index("run_id")["train_loss"]
    assert at_prefix.idxmin() == "c3" and runs.loc[runs["loss"].idxmin(), "run_id"] == "c2"
    table = curve_check.check(runs, points, ["train.lr"])
    row = table.iloc[0]
    assert row["choice"] == "0.002" and row["rank"] == 1 and row["regret"] == 0.0
    assert (
        row["cost_runs"] == pytest.approx(2.0) and row["points"] == "198-198"
    )  # steps 2..199, warmup included: s - 1 updates
    runs.to_csv(tmp_path / "grid.csv", index=False)
    points.to_csv(tmp_path / "curves.csv", index=False)
    argv = ["--strategy", "curve", "--grid", str(tmp_path / "grid.csv"), "--tune", "train.lr"]
    argv += ["--rule", "tissue"]
    out = tmp_path / "check.md"
    assert (
        tuning_check.main([*argv, "--curves", str(tmp_path / "curves.csv"), "--out", str(out)]) == 0
    )
    assert "the grid's best at 1 of 1 arms" in out.read_text()
    # bad input: one line, exit 2, nothing written
    points.drop(columns=["train_loss"]).to_csv(tmp_path / "old.csv", index=False)
    for extra, want in (
        (["--curves", str(tmp_path / "old.csv")], "no train_loss column"),
        ([], "--curves: required"),
    ):
        capsys.readouterr()
        assert tuning_check.main([*argv, *extra, "--out", str(tmp_path / "x.md")]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and want in err and err.count("\n") == 1
        assert not (tmp_path / "x.md").exists()


def test_seed_grid_sets_the_margin_and_first_step_is_checked(tmp_path, capsys):
    """--seed-grid: each arm's one-seed spread is the robust sd of its candidates' paired
    differences (median |d| / (0.6745 sqrt 2)); a choice within it counts, and the text says
    which margin it used. --first-step: the curve law's first step, checked."""
    runs, points = _grid(lrs=(5e-4, 1e-3, 2e-3, 4e-3), floors=(3.3, 3.1, 2.9, 3.2))
    other = runs.copy()
    other["loss"] = other["loss"] + np.array([0.01, -0.03, 0.05, -0.07])
    table = curve_check.check(runs, points, ["train.lr"], seed_runs=other)
    want = np.median([0.01, 0.03, 0.05, 0.07]) / (0.6745 * np.sqrt(2))
    assert table["seed_sd"].iloc[0] == pytest.approx(want)
    text = curve_check.markdown(table, 2.0)
    assert "within one seed's spread (seed sd) of it at 1 of 1" in text
    assert "| seed sd |" in text and f"| {want:.3f} |" in text
    # without another seed: the second-best gap, and the text says so
    assert "second-best gap (margin)" in curve_check.markdown(
        curve_check.check(runs, points, ["train.lr"]), 2.0
    )
    # the first step fitted moves the points seen (steps first..199 of the prefix)
    late = curve_check.check(runs, points, ["train.lr"], first_step=50)
    assert late["points"].iloc[0] == "150-150"
    runs.to_csv(tmp_path / "grid.csv", index=False)
    points.to_csv(tmp_path / "curves.csv", index=False)
    argv = ["--strategy", "curve", "--grid", str(tmp_path / "grid.csv"), "--tune", "train.lr"]
    argv += ["--curves", str(tmp_path / "curves.csv")]
    for extra, want_err in (
        (["--first-step", "0"], "--first-step: expected a step >= 1"),
        (["--seed-grid", str(tmp_path / "none.csv")], "--seed-grid: no such file"),
    ):
        capsys.readouterr()
        assert tuning_check.main([*argv, *extra]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and want_err in err and err.count("\n") == 1


@pytest.mark.slow
def test_a_curve_tuned_sweep_trains_prefixes_then_the_predicted_best(tmp_path):
    """`sweep.tune_curve` end to end: 4 candidates' prefixes (a train loss per step), each
    ranked by the curve law's prediction read back from MLflow, the predicted best decayed to
    the budget; the same arm as a full grid; a rerun trains nothing."""
    corpus = _corpus(tmp_path)
    (tmp_path / "sweep").mkdir()
    rule = "tune_curve: {rule: predicted, runs: 2}"
    curve = sweep_file("null").replace("tune_halving: null", rule)
    (tmp_path / "sweep" / "curve.yaml").write_text(curve)
    (tmp_path / "sweep" / "fullgrid.yaml").write_text(sweep_file("false"))
    env = _env(tmp_path)

    def sweep(name):
        cmd = [sys.executable, "-m", "sweeps.run", "--config-dir", str(tmp_path), f"sweep={name}"]
        cmd += [f"data.path={corpus}", "sweep.jobs=2"]
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
        return out.stdout

    sweep("curve")
    sweep("fullgrid")
    uri = f"sqlite:///{tmp_path / 'mlruns.db'}"
    mlflow.set_tracking_uri(uri)
    df = mlflow.search_runs(experiment_names=["scaling-lab"]).dropna(subset=["tags.run_key"])
    tuned, grid = df[df["tags.sweep"] == "curve"], df[df["tags.sweep"] == "fullgrid"]
    segments = tuned[tuned["tags.tune_role"] == "candidate"]
    # 4 t + (D - t) <= 2 D: t = 16384 / 3 in whole batches of 512 = 10 steps
    assert sorted(segments["tags.tune_rung"].astype(int)) == [5120] * 4 and len(tuned) == 5
    assert set(segments["tags.tune_budget"]) == {"16384"}
    client = MlflowClient(tracking_uri=uri)
    hist = client.get_metric_history(segments["run_id"].iloc[0], "train_loss")
    assert [h.step for h in hist] == [512 * s for s in range(1, 11)]  # a point per step
    # the choice is the lowest prediction, recomputed here from the same records
    preds = {
        r["tags.tune_values"]: sweeps_curve.prediction(client, client.get_run(r["run_id"])).final
        for _, r in segments.iterrows()
    }
    chosen = tuned[tuned["tags.tune_role"] == "chosen"]
    assert list(chosen["tags.tune_values"]) == [min(preds, key=preds.get)]
    assert chosen["params.tokens"].iloc[0] == "16384"
    grid_loss = dict(zip(grid["tags.tune_values"], grid["metrics.final_val_loss"]))
    # the decayed winner is the grid's run at the same value (the same trajectory)
    value = chosen["tags.tune_values"].iloc[0]
    assert chosen["metrics.final_val_loss"].iloc[0] == pytest.approx(grid_loss[value], abs=1e-3)
    out = sweep("curve")
    assert "│ finished" not in out and "│ failed" not in out
    again = mlflow.search_runs(experiment_names=["scaling-lab"]).dropna(subset=["tags.run_key"])
    assert len(again) == len(df)


def test_staged_strategy_plans_doubling_rungs_and_decides_from_predictions(comp, capsys):  # noqa: F811
    """`tune_curve: {}` is the staged rule: rungs t, 2t, 4t inside the stable phase at a worst
    case of 3 runs (and one more decay on the plateau); an arm whose prefixes separate decays its leader from the first rung, an
    arm whose prefixes overlap sends its leading half on, each later segment naming the one
    it continues (its prefix's earlier points)."""
    _, _, tp = tuned_plan(comp, [*TINY, "+sweep.tune_curve={}"])
    assert tp.spec.curve == CurveSpec(3.0, 0.2, "staged") and tp.staged
    for arm in tp.arms:
        t = arm.rungs[0]
        assert arm.rungs == tuple(r for r in (t, 2 * t, 4 * t) if r <= arm.stable)
        spent, _, untuned, _ = tp.cost(arm)
        # the worst case: 3 runs, and a second decay where every survivor is on the plateau
        assert 3.0 < spent / untuned <= 3.0 + (arm.tokens - arm.rungs[-1]) / arm.tokens + 1e-9
    tuning_view.print_tuning(tp, 2, lambda r: "llama")
    assert "staged curve law: rungs t, 2t, 4t, at most 3 runs per arm" in capsys.readouterr().out
    first = tp.first_stage()
    by_arm = {}
    for run in first:
        by_arm.setdefault(_tag(run, "arm"), []).append(run)
    sure, unsure = list(by_arm)[:2]  # two arms: one separates at the first rung, one does not

    def losses_of(keys):
        out = {}
        for run in first:
            lr = float(_tag(run, "tune_values").split("=")[1])
            se = 1e-5 if _tag(run, "arm") == sure else 1.0  # overlapping where unsure
            out[run.run_key] = ("FINISHED", curve_tuning.Prediction(3 + abs(lr - 2e-3), se, 4), "")
        return out

    second = tp.next_stage({}, losses_of, lambda *a: None)
    sure_runs = [r for r in second if _tag(r, "arm") == sure]
    assert [r.phase for r in sure_runs] == ["chosen"] and _tag(sure_runs[0], "tune_values") == (
        "train.lr=0.002"
    )
    a = next(i for i, arm in enumerate(tp.arms) if arm.id == sure)
    assert tp.arms[a].decided_at == 0 and "separated" in tp.arms[a].why
    rung0 = f"train.init_from=/ckpt/{tp.arms[a].last_key[tp.arms[a].alive[0]]}"
    assert any(o.startswith(rung0) for o in sure_runs[0].overrides)
    unsure_runs = [r for r in second if _tag(r, "arm") == unsure]
    assert len(unsure_runs) == 4 and {r.phase for r in unsure_runs} == {"candidate"}
    earlier = {r.run_key for r in first if _tag(r, "arm") == unsure}
    assert {_tag(r, "tune_prev") for r in unsure_runs} <= earlier
    assert _tag(unsure_runs[0], "tune_prev") is not None


def test_staged_arms_on_the_plateau_decay_two_finalists_and_the_measured_loss_chooses(comp):  # noqa: F811
    """Every candidate's prefix on the plateau at every rung: the leading half goes on by the
    train loss, and at the last rung the two lowest decay (role finalist); the lower final
    loss is tagged chosen."""
    _, _, tp = tuned_plan(comp, [*TINY, "+sweep.tune_curve={}"])
    stage, known, chosen = tp.first_stage(), {}, []

    def value(run):
        lr = float(_tag(run, "tune_values").split("=")[1])
        if run.phase == "candidate":  # on the plateau: no prediction ranks; lower lr lower
            return curve_tuning.Prediction(6.0, math.inf, 6.0 + lr, "on the plateau")
        return 4.0 - lr  # the finalists' measured final losses: the higher lr ends lower

    while stage and not any(r.phase == "finalist" for r in stage):
        known.update({r.run_key: r for r in stage})
        stage = tp.next_stage(
            {},
            lambda keys: {k: ("FINISHED", value(known[k]), "") for k in keys},
            lambda members, c: chosen.append(c),
        )
    arm0 = [r for r in stage if _tag(r, "arm") == tp.arms[0].id]
    assert [r.phase for r in arm0] == ["finalist", "finalist"]
    lrs = sorted(float(_tag(r, "tune_values").split("=")[1]) for r in arm0)
    assert lrs == [1e-4, 3e-4]  # the two lowest train losses at the last rung
    assert tp.arms[0].decided_at == len(tp.arms[0].rungs) - 1
    known.update({r.run_key: r for r in stage})
    after = tp.next_stage(
        {},
        lambda keys: {k: ("FINISHED", value(known[k]), "") for k in keys},
        lambda members, c: chosen.append(c),
    )
    assert after == [] and tp.arms[0].chosen is not None
    assert tp.arms[0].candidates[tp.arms[0].chosen].values["train.lr"] == 3e-4


def test_a_later_rungs_prediction_reads_the_whole_prefix_through_tune_prev(tmp_path):
    """A staged segment continues the previous rung's checkpoint in a run of its own; its
    prediction fits the candidate's points from step 2 on, read through the `tune_prev`
    chain (a later segment's point wins where both logged one)."""
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlruns.db'}")
    exp = client.create_experiment("staged")
    row = _row("x", 1e-3, tokens=BT * 600)
    params = {k: str(v) for k, v in row.items() if k.startswith("train.")}
    law = TISSUE.to_theta({"L0": 3.0, "A": 0.9, "alpha": 0.45, "C": 0.3})
    lrs = R.lrs_of(row)
    warm = R.warmup_steps(row["train.warmup"], lrs.size)
    loss = TISSUE.predict(law, features("tissue", lrs, np.arange(1, 201), warm))[0]
    segments = []
    for key, prev, steps in (("s0", None, range(1, 101)), ("s1", "s0", range(100, 201))):
        tags = {"run_key": key, "tune_budget": str(BT * 600)}
        if prev:
            tags["tune_prev"] = prev
        run = client.create_run(exp, tags=tags)
        for k, v in params.items():
            client.log_param(run.info.run_id, k, v)
        metrics = [Metric("train_loss", float(loss[s - 1]), 0, s * BT) for s in steps]
        client.log_batch(run.info.run_id, metrics=metrics)
        client.set_terminated(run.info.run_id)
        segments.append(client.get_run(run.info.run_id))
    tokens, got = sweeps_curve.prefix_history(client, segments[1])
    assert tokens == [s * BT for s in range(1, 201)] and got == pytest.approx(loss, rel=1e-6)
    pred = sweeps_curve.prediction(client, segments[1])
    want = curve_tuning.predict(row, tokens, got, BT * 200)
    assert pred.final == pytest.approx(want.final) and math.isfinite(pred.se)
    # the first segment alone sees its own 100 points only: another prediction
    assert sweeps_curve.prediction(client, segments[0]).final != pytest.approx(pred.final)
