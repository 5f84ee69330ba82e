"""`python -m sweeps.run` end to end on tiny models and a tiny text corpus (byte tokenizer).

Each test runs the real CLI in a subprocess with MLflow, checkpoints and caches in a tmp dir,
and checks the results through `mlflow.search_runs`. Sweep files live in a tmp `--config-dir`.
"""

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from sweep_helpers import TEXT, runs, sweep_cmd, tiny_sweep

from sweeps.stopping import pool_workers

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def env(tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for i in range(20):  # several documents so both splits are non-empty
        (corpus / f"doc{i}.txt").write_text(f"document {i}. " + TEXT * 40)
    (tmp_path / "sweep").mkdir()
    e = dict(os.environ)
    e.update(
        MLFLOW_TRACKING_URI=f"sqlite:///{tmp_path / 'mlruns.db'}",
        SCALING_LAB_RUNS_DIR=str(tmp_path / "runs"),
        SCALING_LAB_CACHE_DIR=str(tmp_path / "cache"),
        PYTHONUNBUFFERED="1",
    )
    return tmp_path, e, corpus


def run_states(tmp):
    """(status, run_key tag) of every run, read with plain sqlite in read-only mode: opening a
    store that the sweep is still creating through MLflow would race its schema migration."""
    import sqlite3

    con = sqlite3.connect(f"file:{tmp / 'mlruns.db'}?mode=ro", uri=True, timeout=5)
    try:
        return con.execute(
            "SELECT r.status, t.value FROM runs r LEFT JOIN tags t"
            " ON t.run_uuid = r.run_uuid AND t.key = 'run_key'"
        ).fetchall()
    finally:
        con.close()


AXES = "  model: [vanilla, llama]\n  model.size: [1e4]\n  train.tokens: [4096, 8192]"


@pytest.mark.slow
def test_dry_run_prints_the_plan_and_creates_nothing(env):
    tmp, e, corpus = env
    (tmp / "sweep" / "t.yaml").write_text(tiny_sweep(AXES))
    out = subprocess.run(
        sweep_cmd(tmp, corpus, "t", "sweep.dry_run=true"),
        env=e,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    for col in ("run key", "arch", "N", "D", "C", "D/N", "est"):
        assert col in out.stdout
    assert "post-layernorm-sinusoidal-mha-gelu" in out.stdout
    assert "pre-rmsnorm-rope-gqa2-swiglu" in out.stdout
    assert "4 to run, 0 skipped" in out.stdout
    assert not (tmp / "mlruns.db").exists()
    assert not (tmp / "runs").exists() and not (tmp / "cache").exists()


@pytest.mark.slow
def test_sweep_records_parent_and_children_and_rerun_skips_finished(env):
    tmp, e, corpus = env
    variants = "variants:\n  base: {}\n  mqa: {model.n_kv_heads: 1}\n"
    (tmp / "sweep" / "t.yaml").write_text(
        tiny_sweep("  model.size: [1e4]\n  train.tokens: [4096]\n  train.seed: [0, 1]") + variants
    )
    out = subprocess.run(
        sweep_cmd(tmp, corpus, "t", "sweep.jobs=2"),
        env=e,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "finished" in out.stdout and "4/4 runs done" in out.stdout
    df = runs(tmp)
    parent = df[df["tags.sweep_parent"] == "t"]
    assert len(parent) == 1 and parent["status"].item() == "FINISHED"
    pid = parent["run_id"].item()
    kids = df[df["tags.mlflow.parentRunId"] == pid]
    assert len(kids) == 4 and set(kids["status"]) == {"FINISHED"}
    assert set(kids["tags.sweep"]) == {"t"}
    assert sorted(kids["tags.variant"]) == ["base", "base", "mqa", "mqa"]
    assert set(kids["tags.arch"]) == {"pre-rmsnorm-rope-gqa2-swiglu", "pre-rmsnorm-rope-mqa-swiglu"}
    assert kids["tags.run_key"].nunique() == 4
    # names readable among siblings: block (variant, preset), N, D and the swept seed
    assert sorted(kids["tags.mlflow.runName"].str.replace(r"-N.*-D", "-N-D", regex=True)) == [
        "llama-N-D4.1K-seed0",
        "llama-N-D4.1K-seed1",
        "mqa-llama-N-D4.1K-seed0",
        "mqa-llama-N-D4.1K-seed1",
    ]
    # the outcome on the parent, the closing summary's best point and UI command
    best = kids["metrics.final_val_loss"].min()
    assert parent["metrics.best_val_loss"].item() == pytest.approx(best)
    assert parent["tags.best_run"].item() in set(kids["tags.mlflow.runName"])
    assert "best point: " in out.stdout and "browse the runs: python -m sweeps.ui" in out.stdout
    assert "Joblib" not in out.stdout + out.stderr and "torch threads" not in out.stdout
    # Hydra made an empty folder per job and per sweep under runs/multirun: none is left
    assert not (tmp / "runs" / "multirun").exists()
    assert not (tmp / "multirun").exists() and not (tmp / "runs" / "0").exists()

    import mlflow

    plan = mlflow.artifacts.download_artifacts(
        run_id=pid, artifact_path="plan.csv", dst_path=str(tmp)
    )
    assert len(Path(plan).read_text().strip().splitlines()) == 5  # header + 4 points

    again = subprocess.run(
        sweep_cmd(tmp, corpus, "t"), env=e, capture_output=True, text=True, timeout=120
    )
    assert again.returncode == 0, again.stderr
    assert "done-before" in again.stdout
    assert len(runs(tmp)) == 5  # nothing new: 4 children + the same parent


@pytest.mark.slow
def test_killed_sweep_finishes_on_rerun_with_one_finished_run_per_point(env):
    tmp, e, corpus = env
    axes = "  model.size: [3e4]\n  train.tokens: [20480, 24576, 28672]"
    (tmp / "sweep" / "k.yaml").write_text(tiny_sweep(axes, "  train.checkpoint_every: 6"))
    cmd = sweep_cmd(tmp, corpus, "k")
    proc = subprocess.Popen(
        cmd, env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
    )
    deadline = time.time() + 200
    try:  # kill the whole sweep (process group) once one point finished and another has started
        while time.time() < deadline:
            time.sleep(0.5)
            if not (tmp / "mlruns.db").exists():
                continue
            try:
                states = run_states(tmp)
            except Exception:  # tables not created yet
                continue
            if any(st == "FINISHED" and key for st, key in states) and any(
                st == "RUNNING" and key for st, key in states
            ):
                if list((tmp / "runs").glob("*/last.pt")):
                    break
        else:
            os.killpg(proc.pid, signal.SIGKILL)
            pytest.fail(
                "sweep did not reach the kill point: " + proc.communicate()[0].decode()[-2000:]
            )
        os.killpg(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    killed = runs(tmp)
    assert (killed["status"] == "RUNNING").sum() >= 1  # interrupted point(s), left as RUNNING

    out = subprocess.run(cmd, env=e, capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    df = runs(tmp)
    kids = df[df["tags.run_key"].notna()]
    assert len(kids) == 3 and kids["tags.run_key"].nunique() == 3  # no duplicated point
    assert set(kids["status"]) == {"FINISHED"}
    assert (df["tags.sweep_parent"] == "k").sum() == 1  # the rerun reused the parent


@pytest.mark.slow
def test_submitit_local_launcher_runs_the_points(env):
    tmp, e, corpus = env
    (tmp / "sweep" / "s.yaml").write_text(
        tiny_sweep("  model.size: [1e4]\n  train.tokens: [2048, 4096]")
    )
    out = subprocess.run(
        sweep_cmd(
            tmp, corpus, "s", "hydra/launcher=submitit_local", "hydra.launcher.timeout_min=5"
        ),
        env=e,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    kids = runs(tmp).dropna(subset=["tags.run_key"])
    assert len(kids) == 2 and set(kids["status"]) == {"FINISHED"}
    assert list((tmp / "runs" / "multirun" / "s").glob("*/.submitit"))


def test_unknown_sweep_lists_the_available_ones(env):
    tmp, e, corpus = env
    out = subprocess.run(
        sweep_cmd(tmp, corpus, "nope"), env=e, capture_output=True, text=True, timeout=60
    )
    assert out.returncode != 0
    assert "sweep=nope: unknown sweep; available:" in out.stderr
    assert "demo" in out.stderr


@pytest.mark.slow
def test_conflicting_axes_fail_before_anything_starts(env):
    tmp, e, corpus = env
    (tmp / "sweep" / "t.yaml").write_text(tiny_sweep(AXES))
    out = subprocess.run(
        sweep_cmd(tmp, corpus, "t", "model.d_model=64"),
        env=e,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2
    # one line naming the fields, no traceback
    assert out.stderr.strip().splitlines()[-1].startswith("error: ")
    assert "model.size and model.d_model are both set" in out.stderr
    assert "Traceback" not in out.stderr
    assert not (tmp / "mlruns.db").exists()


@pytest.mark.slow
def test_wsd_branches_start_from_the_stable_run_checkpoint(env):
    tmp, e, corpus = env
    (tmp / "sweep" / "w.yaml").write_text(
        tiny_sweep("  model.size: [1e4]") + "wsd:\n  tokens: [3072, 6144]\n  decay: 0.25\n"
    )
    out = subprocess.run(
        sweep_cmd(tmp, corpus, "w"), env=e, capture_output=True, text=True, timeout=240
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    kids = runs(tmp).dropna(subset=["tags.run_key"])
    assert len(kids) == 2 and set(kids["status"]) == {"FINISHED"}
    stable = kids[kids["params.train.init_from"] == "None"].iloc[0]
    branch = kids[kids["params.train.init_from"] != "None"].iloc[0]
    assert stable["params.tokens"] == "6144" and branch["params.tokens"] == "3072"
    assert branch["tags.branched_from"] == stable["tags.run_key"]
    assert branch["params.train.init_from"].endswith("tokens_2048.pt")  # 0.75 * 3072 -> 2 batches
    # The branch was keyed at plan time, before its checkpoint existed, by the stable run's key
    # and step; training read them from the checkpoint: the same key, so the plan finds its run.
    import mlflow
    import pandas as pd

    parent = runs(tmp).dropna(subset=["tags.sweep_parent"]).iloc[0]["run_id"]
    plan = mlflow.artifacts.download_artifacts(
        run_id=parent, artifact_path="plan.csv", dst_path=str(tmp)
    )
    assert set(pd.read_csv(plan, dtype=str)["run_key"]) == set(kids["tags.run_key"])


# ---- a local sweep (sweep.jobs=2) stopped from outside: its workers never outlive it ----
# two points long enough to be stopped mid-training
LONG_AXES = "  model.size: [1e4, 2e4]\n  train.tokens: [20000000]"


def _start(tmp, e, corpus):
    (tmp / "sweep" / "long.yaml").write_text(tiny_sweep(LONG_AXES))
    cmd = sweep_cmd(tmp, corpus, "long", "sweep.jobs=2")
    return subprocess.Popen(
        cmd,
        env=e,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # the test signals the sweep process alone, never its group
    )


def _wait_until_both_train(proc, tmp) -> list[int]:
    deadline = time.time() + 240
    while time.time() < deadline:
        time.sleep(0.5)
        if proc.poll() is not None:
            pytest.fail("sweep ended early: " + proc.communicate()[1][-2000:])
        if not (tmp / "mlruns.db").exists():
            continue
        try:
            training = [k for st, k in run_states(tmp) if st == "RUNNING" and k]
        except Exception:  # tables not created yet
            continue
        workers = pool_workers(proc.pid)
        if len(training) == 2 and len(workers) == 2:
            time.sleep(2)  # both past their first steps
            return workers
    os.killpg(proc.pid, signal.SIGKILL)
    pytest.fail("the two points did not start training")


def _gone(pids, timeout_s: float) -> bool:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        alive = []
        for pid in pids:
            try:
                state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if state not in ("Z", "X"):
                alive.append(pid)
        if not alive:
            return True
        time.sleep(0.5)
    return False


@pytest.mark.slow
def test_sigterm_stops_the_workers_and_marks_the_parent_killed(env):
    tmp, e, corpus = env
    proc = _start(tmp, e, corpus)
    try:
        workers = _wait_until_both_train(proc, tmp)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 128 + signal.SIGTERM, err[-3000:]
    assert "stopped by SIGTERM" in err and "Traceback" not in err, err[-3000:]
    assert _gone(workers, 10)
    df = runs(tmp)
    parent = df[df["tags.sweep_parent"] == "long"].iloc[0]
    assert parent["status"] == "KILLED"
    assert parent["tags.failure_reason"] == "stopped by SIGTERM"
    kids = df[df["tags.run_key"].notna()]
    assert len(kids) == 2 and set(kids["status"]) == {"KILLED"}  # each saved and recorded
    assert all(kids["tags.failure_reason"].str.startswith("interrupted by SIGTERM"))


@pytest.mark.slow
def test_workers_end_when_the_sweep_is_killed_with_sigkill(env):
    tmp, e, corpus = env
    proc = _start(tmp, e, corpus)
    try:
        workers = _wait_until_both_train(proc, tmp)
        proc.kill()  # the sweep process alone: its workers are orphaned
        proc.communicate(timeout=30)
        assert _gone(workers, 90), f"workers {workers} outlived the killed sweep"
    finally:
        for pid in pool_workers(proc.pid):
            os.kill(pid, signal.SIGKILL)
    kids = runs(tmp).dropna(subset=["tags.run_key"])
    assert len(kids) == 2 and set(kids["status"]) == {"KILLED"}  # stopped as on SIGTERM


@pytest.mark.slow
def test_kill_9_of_one_worker_is_one_line_and_the_rerun_resumes(env):
    """kill -9 of one worker of a local sweep (sweep.jobs=2) ended the sweep with a 49-line
    TerminatedWorkerError traceback and its runs RUNNING (issue 45): one `error:` line saying
    what happened, the runs it stopped KILLED, nothing recorded lost, and the rerun resumes."""
    tmp, e, corpus = env
    axes = "  model.size: [1e4]\n  train.tokens: [8192, 409600, 614400]"
    (tmp / "sweep" / "w.yaml").write_text(tiny_sweep(axes, "  train.checkpoint_every: 20"))
    cmd = sweep_cmd(tmp, corpus, "w", "sweep.jobs=2")
    proc = subprocess.Popen(
        cmd,
        env=e,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    deadline = time.time() + 240
    try:  # once the short point finished and the two long ones train in the two workers
        while time.time() < deadline:
            time.sleep(0.5)
            if proc.poll() is not None:
                pytest.fail("sweep ended early: " + proc.communicate()[1][-2000:])
            if not (tmp / "mlruns.db").exists():
                continue
            try:
                states = run_states(tmp)
            except Exception:  # tables not created yet
                continue
            workers = pool_workers(proc.pid)
            done = [k for st, k in states if st == "FINISHED" and k]
            training = [k for st, k in states if st == "RUNNING" and k]
            if done and len(training) == 2 and len(workers) == 2:
                break
        else:
            pytest.fail("the two long points did not start training")
        os.kill(workers[0], signal.SIGKILL)  # one worker of this sweep, never anyone else's
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
    assert proc.returncode == 1, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and len([ln for ln in err.splitlines() if "Error" in ln]) == 0, err
    assert errors[0].startswith("error: sweep w: a worker process was killed by SIGKILL; "), err
    assert "2 point(s) stopped mid-run" in errors[0] and "rerun the same command" in errors[0]
    df = runs(tmp)
    kids = df[df["tags.run_key"].notna()].set_index("tags.run_key")
    assert sorted(kids["status"]) == ["FINISHED", "KILLED", "KILLED"]  # none left RUNNING
    killed = kids[kids["status"] == "KILLED"]
    assert all(killed["tags.failure_reason"].str.contains("killed by SIGKILL"))
    finished = kids[kids["status"] == "FINISHED"]
    parent = df[df["tags.sweep_parent"] == "w"].iloc[0]
    assert parent["status"] == "FAILED" and "killed by SIGKILL" in parent["tags.failure_reason"]

    again = subprocess.run(cmd, env=e, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert "2 finished, 1 done-before" in again.stdout, again.stdout[-3000:]
    df = runs(tmp)
    after = df[df["tags.run_key"].notna()].set_index("tags.run_key")
    assert len(after) == 3 and set(after["status"]) == {"FINISHED"}  # one run per point
    assert after.loc[killed.index, "run_id"].tolist() == killed["run_id"].tolist()  # resumed
    assert after.loc[finished.index, "run_id"].tolist() == finished["run_id"].tolist()
    assert after.loc[finished.index, "end_time"].tolist() == finished["end_time"].tolist()
    assert _repeated_steps(tmp) == []  # every metric once per step across the kill


def _repeated_steps(tmp) -> list:
    import sqlite3

    con = sqlite3.connect(f"file:{tmp / 'mlruns.db'}?mode=ro", uri=True)
    try:
        return con.execute(
            "SELECT run_uuid, key, step, COUNT(*) FROM metrics WHERE key NOT LIKE 'system/%'"
            " GROUP BY run_uuid, key, step HAVING COUNT(*) > 1"
        ).fetchall()
    finally:
        con.close()
