"""The time multiplier (analysis.verdicts.wallclock) and the throughput export of analysis.data.load."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from mlflow import MlflowClient
from mlflow.entities import Metric, Param

from analysis.data.load import load_mlflow
from analysis.verdicts import wallclock
from analysis.verdicts.ablation import compare_variants

HARDWARE = {"device": "cpu: Test CPU", "threads": 2, "precision": "fp32", "compile": False}


def ladder(speed: dict[str, float], seed: int = 0) -> pd.DataFrame:
    """base = 20 C^-0.05 and `fast` reaching it with half the compute (m = 2), three budgets x
    two sizes x two seeds; each run's tokens/s is `speed[variant]` / (its C per token)."""
    rng = np.random.default_rng(seed)
    laws = {"base": lambda C: 20 * C**-0.05, "fast": lambda C: 20 * (2 * C) ** -0.05}
    rows = []
    for v, law in laws.items():
        for C in (1e12, 1e13, 1e14):
            for i, N in enumerate((1e4, 3e4)):
                for s in (0, 1):
                    loss = law(C) + 0.03 * i + rng.normal(0, 0.002)
                    tps = speed[v] / (6 * N) * (1 + rng.normal(0, 0.01))
                    rows.append(
                        {
                            "variant": v,
                            "seed": s,
                            "N": N,
                            "D": C / (6 * N),
                            "loss": loss,
                            "tokens_per_sec": tps,
                        }
                    )
    runs = pd.DataFrame(rows).assign(**HARDWARE)
    runs.insert(0, "run_id", [f"r{i}" for i in range(len(runs))])
    return runs.assign(C=6 * runs["N"] * runs["D"])


def test_steady_median_leaves_out_the_first_window_and_the_first_tenth():
    tokens = np.arange(1, 21) * 1000  # 20 log points
    values = np.full(20, 100.0)
    values[:2] = [5.0, 20.0]  # the first window and one inside the first 10% of the run
    assert wallclock.steady_median(tokens, values) == 100.0
    assert wallclock.steady_median([1000], [42.0]) == 42.0  # one point: itself
    assert np.isnan(wallclock.steady_median([], []))


def test_time_multiplier_is_the_compute_multiplier_times_the_flops_ratio():
    # `fast` saves compute (m ~ 2) but sustains 1/4 of base's FLOP/s: slower in wall-clock
    runs = ladder({"base": 4e9, "fast": 1e9})
    ablation = compare_variants(runs, n_boot=200, seed=0)
    time = wallclock.section(runs, ablation, 200, 0)
    assert time["recorded"] and time["hardware"] == "cpu: Test CPU, 2 threads, fp32, not compiled"
    fast = time["variants"]["fast"]
    assert fast["n_cells"] == 6 and fast["rho"] == pytest.approx(0.25, rel=0.02)
    lo, hi = fast["rho_ci95"]
    assert lo < 0.25 < hi
    compute = ablation["variants"]["fast"]["multipliers"]
    for m, c in zip(fast["multipliers"], compute):
        assert m["C"] == c["C"] and m["compute_multiplier"] == c["multiplier"]
        assert m["multiplier"] == pytest.approx(c["multiplier"] * fast["rho"])
    measured = [m for m in fast["multipliers"] if m["measured"]]
    assert [c["verdict"] for c in compute if c["measured"]] == ["better"] * 3
    assert [m["verdict"] for m in measured] == ["slower"] * 3
    assert all(m["verdict"] is None for m in fast["multipliers"] if not m["measured"])
    text = "\n".join(str(b[1]) for b in wallclock.summary_blocks({**ablation, "time": time}))
    assert (
        "fast saves compute (m 1.99, better) and runs 0.251x base's FLOP/s (slower per FLOP)"
        in text
    )
    detail = wallclock.detail_blocks({**ablation, "time": time})
    assert detail[1][1] == ["variant", "runs", "tokens/s", "FLOP/s", "MFU"]


def test_runs_without_throughput_say_so_and_state_nothing():
    runs = ladder({"base": 4e9, "fast": 4e9}).drop(columns="tokens_per_sec")
    ablation = compare_variants(runs, n_boot=50, seed=0)
    time = wallclock.section(runs, ablation, 50, 0)
    assert time == {"recorded": False}
    (block,) = wallclock.summary_blocks({**ablation, "time": time})
    assert block[1].startswith("Time multiplier: not recorded for these runs")
    assert wallclock.detail_blocks({**ablation, "time": time}) == []
    assert wallclock.summary_blocks({"variants": {}}) == []  # no section at all: nothing


def test_hardware_names_what_is_missing_or_mixed():
    runs = ladder({"base": 1e9, "fast": 1e9}).drop(columns=["compile"])
    runs.loc[0, "device"] = "cuda: H100"
    text = wallclock.hardware(runs)
    assert text == "cuda: H100 / cpu: Test CPU (mixed), 2 threads, fp32, compile not recorded"


def test_load_exports_steady_throughput_and_hardware(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlruns.db'}"
    client = MlflowClient(tracking_uri=uri)
    exp = client.create_experiment("tput")
    run = client.create_run(exp, tags={"run_key": "k1", "arch": "a"}).info.run_id
    params = {
        "n_params_nonembed": 1000,
        "tokens_trained": 20000,
        "flops_6nd": 6 * 1000 * 20000,
        "hardware.device": "cpu: Test CPU",
        "hardware.precision": "fp32",
        "hardware.compile": False,
        "torch_threads": 2,
    }
    tps = [10.0] + [100.0] * 9  # the first window is warm-up
    metrics = [Metric("tokens_per_sec", v, 0, 2000 * (i + 1)) for i, v in enumerate(tps)]
    metrics += [Metric("mfu", v / 1000, 0, 2000 * (i + 1)) for i, v in enumerate(tps)]
    metrics.append(Metric("final_val_loss", 3.0, 0, 20000))
    client.log_batch(run, metrics=metrics, params=[Param(k, str(v)) for k, v in params.items()])
    client.set_terminated(run, "FINISHED")
    row = load_mlflow("tput", tracking_uri=uri).frame.iloc[0]
    assert row["tokens_per_sec"] == 100.0 and row["mfu"] == pytest.approx(0.1)
    assert (row["device"], row["threads"], row["precision"]) == ("cpu: Test CPU", 2.0, "fp32")
    assert row["compile"] == "False"


@pytest.mark.usefixtures("one_thread")
def test_a_trained_run_exports_its_hardware_and_throughput(lab):
    from train_helpers import compose, uri_of, value_of

    from training.train import train

    result = train(compose(*lab))
    frame = load_mlflow(value_of(lab, "tracking.experiment"), tracking_uri=uri_of(lab)).frame
    row = frame.set_index("run_id").loc[result.run_id]
    from mlflow import MlflowClient

    params = MlflowClient(uri_of(lab)).get_run(result.run_id).data.params
    # the intra-op threads the run recorded (what an earlier test in this worker left may differ)
    assert row["device"].startswith("cpu: ") and row["threads"] == float(params["torch_threads"])
    assert (row["precision"], row["compile"]) == ("fp32", "False")
    assert row["tokens_per_sec"] > 0 and row["mfu"] > 0
