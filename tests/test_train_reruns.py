"""Rerunning a config: a FINISHED run is reused, another experiment trains in full, a second
identical command waits for the first, a resume keeps the run's thread count, a WSD branch
continues from another run's checkpoint."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from train_helpers import (
    HANG_DEADLINE_S,
    compose,
    finish,
    history,
    runs_df,
    start,
    steps_once,
    uri_of,
    value_of,
)

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.slow
def test_same_config_in_a_second_experiment_trains_in_full_and_rerun_reuses(lab):
    """Checkpoints are shared by run key (one runs folder for every experiment): the second
    experiment's run trains every step instead of resuming the first one's final checkpoint,
    with the same losses; a rerun in the first experiment reuses its run. D is what was
    trained: 8000 tokens asked for are 32 whole batches of 256 = 8192."""
    from analysis.data.load import load_mlflow
    from training.checkpoint import owner
    from training.config import ConfigError
    from training.train import train

    cfg = [*lab, "model.dropout=0.1", "train.label_smoothing=0.1", "train.tokens=8000"]
    first = train(compose(*cfg))
    other = [*cfg, "tracking.experiment=elsewhere"]  # the same paths.runs_dir
    second = train(compose(*other))
    assert second.run_key == first.run_key  # tracking is not part of the key
    assert not second.reused and second.run_id != first.run_id
    assert second.steps == 32 and second.tokens_consumed == 8192
    uri = uri_of(lab)
    a, b = history(uri, first.run_id, "train_loss"), history(uri, second.run_id, "train_loss")
    assert [s for s, _ in b] == [256 * k for k in range(4, 33, 4)]  # every step trained
    assert a == b and first.final_val_loss == second.final_val_loss
    assert [s for s, _ in history(uri, second.run_id, "val_loss")] == [2048, 4096, 6144, 8192]
    assert owner(Path(second.run_dir) / "last.pt") == second.run_id
    again = train(compose(*cfg))
    assert again.reused and again.run_id == first.run_id
    assert again.final_val_loss == first.final_val_loss
    assert len(runs_df(lab)) == 1
    with pytest.raises(
        ConfigError,
        match=f"train.resume=true: .* written by MLflow run {second.run_id}, not by run key",
    ):
        train(compose(*cfg, "tracking.experiment=third", "train.resume=true"))
    row = runs_df(other).iloc[0]
    assert row["params.tokens"] == "8000" and row["params.tokens_trained"] == "8192"
    assert int(row["params.flops_6nd"]) == 6 * int(row["params.n_params_nonembed"]) * 8192
    assert row["tags.data_source"].startswith("text-")
    loaded = load_mlflow("elsewhere", tracking_uri=uri).frame
    assert list(loaded["D"]) == [8192] and list(loaded["run_id"]) == [second.run_id]


@pytest.mark.slow
def test_wsd_branch_continues_from_stable_checkpoint(lab, tmp_path):
    from training.checkpoint import branch_checkpoint_path
    from training.train import train

    wsd = [*lab, "train.schedule=wsd", "train.warmup=0.25"]
    stable = train(compose(*wsd, "train.decay_fraction=0", "train.save_at_tokens=[4096]"))
    point = branch_checkpoint_path(tmp_path / "runs", stable.run_key, 4096)
    assert point.exists()
    branch = train(compose(*wsd, "train.tokens=6144", f"train.init_from={point}"))
    assert branch.status == "FINISHED" and branch.run_key != stable.run_key
    uri = uri_of(lab)
    stable_lr = dict(history(uri, stable.run_id, "lr"))
    branch_lr = dict(history(uri, branch.run_id, "lr"))
    # Same warmup (8 steps, from the 32-step stable run, not 25% of the 24-step branch): the
    # branch only has steps after the branch point; its lr decays from the peak to the floor.
    assert min(branch_lr) > 4096 and stable_lr[2048] == pytest.approx(1e-3)
    assert branch_lr[6144] == pytest.approx(1e-4) and branch_lr[5120] > branch_lr[6144]
    df = runs_df(lab).set_index("run_id")
    assert df.loc[branch.run_id, "tags.branched_from"] == stable.run_key
    assert df.loc[branch.run_id, "params.tokens"] == "6144"


@pytest.mark.slow
def test_a_resume_uses_the_thread_count_the_run_started_with(lab, caplog):
    """Losses differ in about the 9th digit between 1 and 2 intra-op threads, so a run started
    with 2 and resumed in a 1-thread process resumes with 2 (its `torch_threads` param), and
    ends bit-identical to an uninterrupted 2-thread run; the process's count is restored."""
    import shutil

    import torch

    from training import tracking
    from training.train import train

    run = [*lab, "train.tokens=4096", "train.save_at_tokens=[2048]"]  # 16 steps, branch at 8
    torch.set_num_threads(2)
    try:
        whole = train(
            compose(
                *run,
                "tracking.experiment=whole-2-threads",
                "paths.runs_dir=" + value_of(lab, "paths.runs_dir") + "-whole",
            )
        )
        first = train(compose(*run))
    finally:
        torch.set_num_threads(1)
    client = tracking.client(uri_of(lab))
    assert client.get_run(first.run_id).data.params["torch_threads"] == "2"
    # Make it an interrupted run: its checkpoint at step 8 becomes last.pt, the run KILLED.
    rdir = Path(first.run_dir)
    shutil.copy(rdir / "tokens_2048.pt", rdir / "last.pt")
    client.set_terminated(first.run_id, "KILLED")
    with caplog.at_level("WARNING", logger="training.train"):
        resumed = train(compose(*run))
    assert resumed.run_id == first.run_id and resumed.status == "FINISHED"
    assert any("started with 2 threads: resuming with 2" in r.getMessage() for r in caplog.records)
    assert resumed.final_val_loss == whole.final_val_loss
    assert torch.get_num_threads() == 1


@pytest.mark.slow
def test_two_identical_commands_at_once_train_one_run(lab, tmp_path):
    """The second command waits for the first (the run key's lock) and then finds the run
    FINISHED: one MLflow run, one run's worth of metrics."""
    from training.train import train

    cfg = [*lab, "train.tokens=256000", "train.checkpoint_every=100", "train.eval_every=250"]
    train(
        compose(*cfg, "train.tokens=512", "train.warmup=0", "tracking.experiment=warm")
    )  # the cache
    outputs = [tmp_path / "first.log", tmp_path / "second.log"]
    first = start(cfg, outputs[0])
    try:  # the second starts once the first holds the lock (has written its pid in it)
        deadline = time.monotonic() + HANG_DEADLINE_S
        while not any(p.read_text().strip() for p in (tmp_path / "runs").glob("*/.lock")):
            assert first.poll() is None and time.monotonic() < deadline, outputs[0].read_text()
            time.sleep(0.02)
        second = start(cfg, outputs[1])
    finally:
        rcs = [finish(first, outputs[0])]
    rcs.append(finish(second, outputs[1]))
    texts = [p.read_text(errors="replace") for p in outputs]
    assert rcs == [0, 0], texts
    assert "reused=False" in texts[0] and "reused=True" in texts[1]
    df = runs_df(lab)
    assert len(df) == 1 and df.iloc[0]["status"] == "FINISHED"
    steps = steps_once(uri_of(lab), df.iloc[0]["run_id"])
    assert steps["train_loss"] == [256 * k for k in range(4, 1001, 4)]
    assert steps["val_loss"] == [256 * k for k in (250, 500, 750, 1000)]
    assert "is being trained by another process" in texts[1]  # it waited, then reused


def test_a_symlink_planted_as_the_run_key_lock_is_refused_and_its_target_kept(lab, tmp_path):
    """The lock is opened without following links: one `error:` line naming it, exit 2, and
    the file the link points to is not truncated or written."""
    from training.train import train

    first = train(compose(*lab))
    lock = tmp_path / "runs" / first.run_key / ".lock"
    precious = tmp_path / "precious.txt"
    precious.write_text("keep me\n")
    lock.unlink()
    lock.symlink_to(precious)
    output = tmp_path / "symlink.log"
    rc = finish(start(lab, output), output)
    lines = output.read_text(errors="replace").strip().splitlines()
    assert precious.read_text() == "keep me\n"
    assert rc == 2 and lines[-1] == (
        f"error: {lock}: is a symbolic link, not a lock file (not followed); remove it"
    ), lines
    assert not any(line.startswith(("error:", "Traceback")) for line in lines[:-1]), lines


@pytest.mark.slow
def test_the_same_command_twice_at_once_with_two_runs_folders_trains_one_run(lab, tmp_path):
    """Two runs folders, one store: the run key is claimed in the store, so one process trains
    and the other ends at once with one `error:` line naming the process that trains it (exit
    2); one MLflow run with every metric once, and no claim left behind."""
    from mlflow.tracking import MlflowClient

    from training.train import train

    cfg = [*lab, "train.tokens=102400", "train.checkpoint_every=100", "train.eval_every=100"]
    train(compose(*cfg, "train.tokens=512", "train.warmup=0", "tracking.experiment=warm"))
    outputs = [tmp_path / "a.log", tmp_path / "b.log"]
    procs = [start([*cfg, f"paths.runs_dir={tmp_path / n}"], o) for n, o in zip("ab", outputs)]
    rcs = [finish(p, o) for p, o in zip(procs, outputs)]
    texts = [p.read_text(errors="replace") for p in outputs]
    assert sorted(rcs) == [0, 2], texts
    winner, loser = (0, 1) if rcs[0] == 0 else (1, 0)
    errors = [line for line in texts[loser].splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in texts[loser], texts[loser][-3000:]
    assert "is already being trained in experiment" in errors[0]
    assert f"pid {procs[winner].pid} " in errors[0]
    assert "reused=False" in texts[winner]
    df = runs_df(lab)
    assert len(df) == 1 and df.iloc[0]["status"] == "FINISHED"
    steps = steps_once(uri_of(lab), df.iloc[0]["run_id"])
    assert steps["train_loss"] == [256 * k for k in range(4, 401, 4)]
    assert steps["val_loss"] == [256 * k for k in (100, 200, 300, 400)]
    client = MlflowClient(uri_of(lab))
    tags = client.get_experiment_by_name(value_of(lab, "tracking.experiment")).tags
    assert not [t for t in tags if t.startswith("trainer.")]
