"""Faults during training: SIGTERM, SIGKILL, divergence, an unreadable checkpoint, a full or
read-only disk. Nothing lost, nothing doubled: every metric has one point per step, and an
interrupted run resumes into the same MLflow run and FINISHES."""

from __future__ import annotations

import contextlib
import math
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sweep_helpers import TEXT, runs, sweep_cmd, tiny_sweep
from train_helpers import (
    HANG_DEADLINE_S,
    LONG,
    ROOT,
    compose,
    finish,
    history,
    runs_df,
    start,
    steps_once,
    uri_of,
    value_of,
    wait_for_file,
)

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.slow
def test_sigterm_checkpoints_marks_killed_and_rerun_resumes_to_the_same_curves(lab, tmp_path):
    from mlflow.tracking import MlflowClient

    from training.checkpoint import load_checkpoint
    from training.train import train

    long = [*lab, *LONG]
    output = tmp_path / "terminated.log"
    proc = start(long, output)
    try:
        wait_for_file(tmp_path / "runs", "*/last.pt", proc, output, timeout_s=HANG_DEADLINE_S)
        proc.send_signal(signal.SIGTERM)
    finally:
        rc = finish(proc, output)
    text = output.read_text(errors="replace")
    assert rc == 128 + signal.SIGTERM, text[-3000:]
    assert "error: interrupted by SIGTERM at step" in text and "Traceback" not in text
    (last,) = (tmp_path / "runs").glob("*/last.pt")
    state = load_checkpoint(last)
    stopped = state["step"]
    assert 20 <= stopped < 200, "the run must stop mid-way for this test to mean anything"
    row = runs_df(lab).iloc[0]
    assert row["status"] == "KILLED" and row["end_time"] is not None
    assert row["tags.failure_reason"] == (
        f"interrupted by SIGTERM at step {stopped}; checkpoint saved, rerun to resume"
    )
    assert state["mlflow_run_id"] == row["run_id"]
    boundary = max(b for b in range(stopped + 1) if b % 4 == 0 or b % 50 == 0)  # log, eval
    assert len(state["pending_losses"]) == stopped - boundary  # the unfinished log window

    resumed = train(compose(*long))
    assert resumed.status == "FINISHED" and resumed.run_id == row["run_id"] and not resumed.reused
    clean = [*long, "tracking.experiment=uninterrupted", f"paths.runs_dir={tmp_path / 'c'}"]
    uninterrupted = train(compose(*clean))
    uri = uri_of(lab)
    assert history(uri, resumed.run_id, "train_loss") == history(
        uri, uninterrupted.run_id, "train_loss"
    )  # the same points, bit for bit, also the log window the interrupt split
    assert resumed.final_val_loss == uninterrupted.final_val_loss
    assert steps_once(uri, resumed.run_id) == steps_once(uri, uninterrupted.run_id)
    df = runs_df(lab)
    assert len(df) == 1 and df.iloc[0]["status"] == "FINISHED"
    # the KILLED attempt's reason does not outlive it
    assert "failure_reason" not in MlflowClient(uri).get_run(resumed.run_id).data.tags


@pytest.mark.slow
def test_resume_after_sigkill_matches_uninterrupted(lab, tmp_path):
    from training.train import train

    long = [*lab, "train.tokens=51200", "train.checkpoint_every=20", "train.eval_every=50"]
    output = tmp_path / "killed_run.log"
    with open(output, "wb") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "training.train", *long],
            cwd=ROOT,
            env={**os.environ, "OMP_NUM_THREADS": "1"},
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    runs = tmp_path / "runs"
    try:  # kill it as soon as its first checkpoint exists, however long start-up takes
        last = wait_for_file(runs, "*/last.pt", proc, output, timeout_s=HANG_DEADLINE_S)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    from training.checkpoint import load_checkpoint

    assert list(runs.glob("*/last.pt")) == [last]
    killed_at = load_checkpoint(last)["step"]
    assert 0 < killed_at < 200, "the run must be killed mid-way for this test to mean anything"
    df = runs_df(lab)
    assert list(df["status"]) == ["RUNNING"]

    resumed = train(compose(*long))  # same config: finds the checkpoint and the MLflow run
    assert resumed.run_id == df.iloc[0]["run_id"] and not resumed.reused
    clean = [*long, "tracking.experiment=uninterrupted", f"paths.runs_dir={tmp_path / 'c'}"]
    uninterrupted = train(compose(*clean))
    assert resumed.final_val_loss == uninterrupted.final_val_loss
    assert resumed.final_train_loss == uninterrupted.final_train_loss
    assert runs_df(lab).iloc[0]["status"] == "FINISHED"


@pytest.mark.slow
def test_resume_after_sigkill_logs_every_step_once(lab, tmp_path):
    """SIGKILL after the process logged steps past its checkpoint: the resumed run trains those
    steps again and does not log them a second time. (Checkpoints every 100 steps: metrics are
    written off the loop, so they trail the step by a moment.)"""
    from mlflow.tracking import MlflowClient

    from training.checkpoint import load_checkpoint
    from training.train import train

    # the kill is timed by what the store holds: every window is sent at once (the default
    # coalesces a second of windows, and a fast machine then finishes before they arrive)
    long = [*lab, *LONG, "train.checkpoint_every=100", "tracking.send_interval_s=0"]
    output = tmp_path / "killed.log"
    proc = start(long, output)
    uri, client = uri_of(lab), MlflowClient(uri_of(lab))
    try:
        last = wait_for_file(tmp_path / "runs", "*/last.pt", proc, output, HANG_DEADLINE_S)
        deadline = time.monotonic() + HANG_DEADLINE_S
        while True:  # until two log steps past the checkpoint are in MLflow
            assert proc.poll() is None, output.read_text()[-3000:]
            assert time.monotonic() < deadline, output.read_text()[-3000:]
            ckpt_tokens = load_checkpoint(last)["tokens"]
            run = client.search_runs([client.get_experiment_by_name(tmp_path.name).experiment_id])
            logged = [s for s, _ in history(uri, run[0].info.run_id, "train_loss")] if run else []
            if logged and max(logged) >= ckpt_tokens + 2 * 4 * 256:
                break
            time.sleep(0.02)
    finally:
        proc.kill()
        proc.wait()
    ckpt_tokens = load_checkpoint(last)["tokens"]
    logged = [s for s, _ in history(uri, run[0].info.run_id, "train_loss")]
    assert max(logged) > ckpt_tokens and ckpt_tokens < 51200  # points to be trained again
    assert list(runs_df(lab)["status"]) == ["RUNNING"]

    resumed = train(compose(*long))
    assert resumed.status == "FINISHED" and resumed.run_id == run[0].info.run_id
    steps = steps_once(uri, resumed.run_id)
    assert steps["train_loss"] == [256 * k for k in range(4, 201, 4)]
    assert steps["val_loss"] == [256 * k for k in (50, 100, 150, 200)]


@pytest.mark.slow
def test_nan_loss_fails_run_and_keeps_metrics(lab):
    from training.train import train

    result = train(
        compose(*lab, "train.lr=1e9", "train.weight_decay=0", "train.grad_clip=0", "train.warmup=0")
    )
    assert result.status == "FAILED" and result.failure_reason.startswith("diverged at step ")
    row = runs_df(lab).iloc[0]
    assert row["status"] == "FAILED" and row["tags.failure_reason"] == result.failure_reason
    assert "metrics.train_loss" in row and row["params.train.lr"] == "1000000000.0"


@pytest.mark.slow
def test_diverged_run_logs_the_non_finite_loss_at_its_step(lab):
    from training.train import train

    result = train(
        compose(
            *lab,
            "train.lr=1e9",
            "train.weight_decay=0",
            "train.grad_clip=0",
            "train.warmup=0",
            "train.log_every=8",
        )
    )
    assert result.status == "FAILED"
    k = int(result.failure_reason.removeprefix("diverged at step "))
    points = history(uri_of(lab), result.run_id, "train_loss")
    assert points[-1][0] == k * 256 and not math.isfinite(points[-1][1])
    assert all(s < k * 256 and math.isfinite(v) for s, v in points[:-1])
    assert history(uri_of(lab), result.run_id, "lr")[-1][0] == k * 256


@pytest.mark.slow
def test_sweep_whose_points_all_failed_before_stays_failed_on_rerun(tmp_path):
    """A rerun skips the point that diverged before (no sweep.retry_failed): the parent is
    FAILED again, not FINISHED, and the command says why and exits 1."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for i in range(20):
        (corpus / f"doc{i}.txt").write_text(f"document {i}. " + TEXT * 40)
    (tmp_path / "sweep").mkdir()
    env = {
        **os.environ,
        "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlruns.db'}",
        "SCALING_LAB_RUNS_DIR": str(tmp_path / "runs"),
        "SCALING_LAB_CACHE_DIR": str(tmp_path / "cache"),
        "OMP_NUM_THREADS": "1",
    }
    diverging = "  train.lr: 1e9\n  train.weight_decay: 0\n  train.grad_clip: 0\n  train.warmup: 0"
    sweep = tiny_sweep("  model.size: [1e4]\n  train.tokens: [4096]", diverging)
    (tmp_path / "sweep" / "diverge.yaml").write_text(sweep)
    cmd = sweep_cmd(tmp_path, corpus, "diverge")
    first = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=HANG_DEADLINE_S)
    assert first.returncode == 1, first.stdout[-3000:] + first.stderr[-3000:]
    again = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=HANG_DEADLINE_S)
    assert again.returncode == 1, again.stdout[-3000:] + again.stderr[-3000:]
    assert "1 point(s) FAILED in an earlier run and were skipped" in again.stderr
    df = runs(tmp_path)
    parent = df[df["tags.sweep_parent"] == "diverge"]
    assert len(parent) == 1 and parent["status"].item() == "FAILED"
    kids = df[df["tags.mlflow.parentRunId"] == parent["run_id"].item()]
    assert list(kids["status"]) == ["FAILED"]  # skipped, not retrained


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["empty", "truncated"])
def test_unreadable_checkpoint_fails_with_one_line_and_marks_the_run_failed(lab, tmp_path, damage):
    """A `last.pt` cut short (or empty): one `error:` line naming the file and
    `train.resume=false`, exit 2, the run it would resume FAILED with that reason; a stray
    temporary file of a killed write is removed; `train.resume=false` then trains."""
    from training import tracking
    from training.spec import resolve_config
    from training.train import train

    short = [*lab, "train.tokens=2048", "train.checkpoint_every=4"]
    spec = resolve_config(compose(*short))
    uri = uri_of(lab)
    exp = tracking.ensure_experiment(uri, tmp_path.name)
    run_id = tracking.client(uri).create_run(exp, tags={"run_key": spec.run_key}).info.run_id
    rdir = tmp_path / "runs" / spec.run_key
    rdir.mkdir(parents=True)
    last = rdir / "last.pt"
    if damage == "empty":
        last.write_bytes(b"")
    else:  # a real checkpoint, cut in half
        import torch

        torch.save({"model": {"w": torch.zeros(1000)}, "mlflow_run_id": run_id}, last)
        last.write_bytes(last.read_bytes()[: last.stat().st_size // 2])
    stray = rdir / "last.pt.tmp-abc123"
    stray.write_bytes(b"partial")

    out = subprocess.run(
        [sys.executable, "-m", "training.train", *short],
        cwd=ROOT,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
        timeout=HANG_DEADLINE_S,
    )
    assert out.returncode == 2, out.stdout[-3000:] + out.stderr[-3000:]
    errors = [line for line in out.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in out.stderr, out.stderr[-3000:]
    assert f"error: {last}: unreadable checkpoint" in errors[0]
    assert "train.resume=false" in errors[0]
    assert not stray.exists()
    row = runs_df(lab).set_index("run_id").loc[run_id]
    assert row["status"] == "FAILED" and row["tags.failure_reason"] == errors[0][len("error: ") :]

    fresh = train(compose(*short, "train.resume=false"))
    assert fresh.status == "FINISHED" and fresh.run_id != run_id


@pytest.mark.slow
@pytest.mark.parametrize("full_at", ["last.pt", "config.yaml"])
def test_a_full_disk_says_so_and_where(lab, capsys, monkeypatch, full_at):
    """A checkpoint write hitting ENOSPC (a real one: the temporary file's writes go to
    /dev/full; torch.save hides it behind `RuntimeError: [enforce fail ...]`): the run is FAILED
    with "no space left on device" and the path, the CLI prints that one line and exits 2, and
    no temporary file is left. Full already at the run's config.yaml (written before the MLflow
    run): no run at all, instead of one left RUNNING."""
    from training import checkpoint
    from training.train import _main

    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full on this system")

    def full_disk(fd: int, path: Path):
        if path.name != full_at:
            return os.fdopen(fd, "wb")
        os.close(fd)
        return open("/dev/full", "wb")

    monkeypatch.setattr(checkpoint, "_open_new", full_disk)
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        _main(compose(*lab, "train.checkpoint_every=8"))
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    err = [line for line in err.splitlines() if line.startswith("error")]  # not MLflow's INFO
    (rdir,) = (Path(value_of(lab, "paths.runs_dir"))).iterdir()
    assert err == [f"error: cannot write {rdir / full_at}: no space left on device"]
    if full_at == "config.yaml":
        assert len(runs_df(lab)) == 0
        assert sorted(p.name for p in rdir.iterdir()) == [".lock"]
        return
    row = runs_df(lab).iloc[0]
    assert row["status"] == "FAILED"
    assert row["tags.failure_reason"] == (
        f"OSError: [Errno 28] cannot write {rdir / 'last.pt'}: no space left on device"
    )
    assert sorted(p.name for p in rdir.iterdir()) == [".lock", "config.yaml"]


@pytest.mark.parametrize("where", ["paths.runs_dir", "paths.cache_dir", "tracking.uri"])
def test_an_unwritable_folder_is_one_line_naming_it_and_no_run_is_left_running(
    lab, tmp_path, capsys, where
):
    """A read-only folder (or, as root, which may write anywhere, a file where the folder
    should be): one `error:` line naming the path, exit 2, no MLflow run RUNNING."""
    import stat

    from training.train import _main

    blocked = tmp_path / "blocked"
    if os.geteuid() == 0:
        blocked.write_text("a file, not a folder")
    else:
        blocked.mkdir()
        blocked.chmod(stat.S_IRUSR | stat.S_IXUSR)
    target = {
        "paths.runs_dir": f"paths.runs_dir={blocked / 'runs'}",
        "paths.cache_dir": f"paths.cache_dir={blocked / 'cache'}",
        "tracking.uri": f"tracking.uri=sqlite:///{blocked / 'store' / 'mlruns.db'}",
    }[where]
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        _main(compose(*lab, target))
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    err = [line for line in err.splitlines() if "mlflow" not in line]  # not MLflow's INFO
    assert len(err) == 1 and err[0].startswith("error: ") and str(blocked) in err[0], err
    if where != "tracking.uri":
        df = runs_df(lab)
        assert df.empty or "RUNNING" not in set(df["status"])


# ---------------------------------------------------------------- kill -9 at every timing
_REFERENCES: dict[tuple[str, ...], str] = {}


def _reference(lab: list[str], extra: list[str], folder: Path) -> str:
    """The run id of the same command trained without interruption (its own experiment and
    runs folder in the same store), trained once per `extra` in the session."""
    from training.train import train

    key = tuple(extra)
    if key not in _REFERENCES:
        name = f"reference-{len(_REFERENCES)}-{folder.name}"
        clean = [*lab, *extra, f"tracking.experiment={name}", f"paths.runs_dir={folder / name}"]
        result = train(compose(*clean))
        assert result.status == "FINISHED" and not result.reused
        _REFERENCES[key] = result.run_id
    return _REFERENCES[key]


def _points(uri: str, run_id: str) -> dict[tuple[str, int], float]:
    """{(key, step): value} of every metric but MLflow's system samples, asserting that no
    (key, step) was logged twice."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    out: dict[tuple[str, int], float] = {}
    for key in client.get_run(run_id).data.metrics:
        if key.startswith("system/"):
            continue
        for m in client.get_metric_history(run_id, key):
            assert (key, m.step) not in out, f"{key} logged twice at step {m.step}"
            out[key, m.step] = m.value
    return out


TIMED = ("tokens_per_sec", "mfu", "wall_time_s")  # clocks: differ between any two runs


def _assert_one_run_every_point_once(lab: list[str], run_id: str, reference: str) -> None:
    uri = uri_of(lab)
    df = runs_df(lab)
    assert list(df["run_id"]) == [run_id] and list(df["status"]) == ["FINISHED"]
    got, want = _points(uri, run_id), _points(uri, reference)
    assert sorted(got) == sorted(want), (
        f"missing {sorted(set(want) - set(got))}, extra {sorted(set(got) - set(want))}"
    )
    differ = {k: (got[k], want[k]) for k in got if k[0] not in TIMED and got[k] != want[k]}
    assert not differ  # bit-identical: losses, lr, final_val_loss, final_train_loss, epochs


def _run_id(client, experiment: str) -> str | None:
    exp = client.get_experiment_by_name(experiment)
    runs = client.search_runs([exp.experiment_id]) if exp is not None else []
    return runs[0].info.run_id if runs else None


def _kill_9_when(proc, output: Path, ready) -> None:
    """SIGKILL `proc` as soon as `ready()` holds (polled every ~1 ms)."""
    deadline = time.monotonic() + HANG_DEADLINE_S
    try:
        while not ready():
            if proc.poll() is not None:
                pytest.fail(
                    f"exited ({proc.returncode}) before the kill point:\n"
                    + output.read_text()[-3000:]
                )
            if time.monotonic() > deadline:
                pytest.fail("no kill point reached:\n" + output.read_text()[-3000:])
            time.sleep(0.001)
    finally:
        proc.kill()
        proc.wait()


def _logged_train_losses(lab: list[str], at_least: int):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri_of(lab))

    def ready() -> bool:
        try:
            run_id = _run_id(client, value_of(lab, "tracking.experiment"))
            return (
                run_id is not None and len(history(uri_of(lab), run_id, "train_loss")) >= at_least
            )
        except Exception:  # the store is being created or written by the child
            return False

    return ready


def _exists(folder: Path, pattern: str):
    return lambda: any(folder.glob(pattern))


# (what is killed, overrides, when) -- LONG: 200 steps, log every 4, eval every 50. The points
# timed by what the store holds send every window at once (tracking.send_interval_s=0: the
# default's one request a second can arrive after the first checkpoint on a fast machine); the
# points timed by files run with the default, coalesced sends.
PER_WINDOW = "tracking.send_interval_s=0"
KILL_POINTS = {
    "before_the_first_checkpoint": (["train.checkpoint_every=100", PER_WINDOW], "logged", 3),
    # 1000 steps, not 200: its only checkpoint is the final one, and a poll of the store slowed
    # by a loaded machine once saw 10 points only after the 200-step run had written it
    "without_checkpoints": (
        ["train.checkpoint_every=0", PER_WINDOW, "train.tokens=256000"],
        "logged",
        10,
    ),
    "during_a_checkpoint_write": (["train.checkpoint_every=4"], "file", "*/last.pt.tmp-*"),
    "mid_window_after_an_eval_checkpoint": (
        ["train.log_every=8", "train.eval_every=20", "train.checkpoint_every=20"],
        "file",
        "*/last.pt",
    ),
    "between_the_final_checkpoint_and_finished": (
        ["train.checkpoint_every=0", "train.save_final_checkpoint=true"],
        "file",
        "*/last.pt",
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("point", list(KILL_POINTS))
def test_kill_9_then_rerun_records_every_metric_once_and_the_same_losses(lab, tmp_path, point):
    """A real kill -9 of `python -m training.train` at each timing, then the same command
    again: one MLflow run, every (metric, step) of an uninterrupted run exactly once (none
    doubled, none missing), and the losses, lr and final losses bit-identical to it."""
    from training.checkpoint import load_checkpoint
    from training.train import train

    extra, kind, arg = KILL_POINTS[point]
    cmd = [*lab, *LONG, *extra]
    reference = _reference(lab, [*LONG, *extra], tmp_path.parent)
    output = tmp_path / "killed.log"
    proc = start(cmd, output)
    runs = tmp_path / "runs"
    ready = _logged_train_losses(lab, arg) if kind == "logged" else _exists(runs, arg)
    _kill_9_when(proc, output, ready)
    last = list(runs.glob("*/last.pt"))
    if point in ("before_the_first_checkpoint", "without_checkpoints"):
        assert not last, "killed after a checkpoint: not the timing this case is about"
    if point == "mid_window_after_an_eval_checkpoint":
        assert load_checkpoint(last[0])["step"] == 20
    if point == "between_the_final_checkpoint_and_finished":
        assert load_checkpoint(last[0])["step"] == 200
    assert list(runs_df(lab)["status"]) == ["RUNNING"]  # killed before FINISHED

    rerun = train(compose(*cmd))
    assert rerun.status == "FINISHED" and not rerun.reused
    _assert_one_run_every_point_once(lab, rerun.run_id, reference)
    assert not list(runs.glob("*/*.tmp-*"))  # a killed write's temporary is removed


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start_server(port: int, folder: Path) -> subprocess.Popen:
    """A real `mlflow server` on 127.0.0.1:`port` over the SQLite store in `folder`, once it
    answers /health."""
    from training.tracking import TrackingUnavailable, check_reachable

    server = subprocess.Popen(
        [
            str(Path(sys.executable).with_name("mlflow")),
            *("server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1"),
            *("--backend-store-uri", f"sqlite:///{folder / 'server.db'}"),
            *("--artifacts-destination", str(folder / "artifacts")),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + HANG_DEADLINE_S
    while True:
        try:
            check_reachable(f"http://127.0.0.1:{port}", timeout_s=1)
            return server
        except TrackingUnavailable:
            assert server.poll() is None and time.monotonic() < deadline, "server did not start"
            time.sleep(0.5)


def _kill_server(server: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(server.pid, signal.SIGKILL)
    server.wait()


@pytest.mark.slow
def test_a_tracking_server_dying_mid_run_ends_it_in_one_line_and_a_rerun_finishes_it(lab, tmp_path):
    """The server is killed (SIGKILL) after the run's first checkpoint: the run waits
    `tracking.timeout_s` for it, then ends with one `error:` line naming the server and the
    step, no traceback, exit 2, the checkpoint kept. With the server back, the same command
    resumes and finishes: one run, every metric once, the losses of an uninterrupted run."""
    from training.train import train

    port, folder = _free_port(), tmp_path / "server"
    uri = f"http://127.0.0.1:{port}"
    cmd = [*lab, f"tracking.uri={uri}", "tracking.timeout_s=5", *LONG]
    server = _start_server(port, folder)
    try:
        reference = _reference(cmd, LONG, tmp_path.parent)
        output = tmp_path / "lost.log"
        proc = start(cmd, output)
        try:
            wait_for_file(tmp_path / "runs", "*/last.pt", proc, output, HANG_DEADLINE_S)
        finally:
            _kill_server(server)
        lost_at = time.monotonic()
        rc = finish(proc, output)
        waited = time.monotonic() - lost_at
        text = output.read_text(errors="replace")
        errors = [line for line in text.splitlines() if line.startswith("error:")]
        assert rc == 2 and "Traceback" not in text, text[-3000:]
        assert len(errors) == 1 and errors[0].startswith(
            f"error: tracking server unreachable at {uri} since step "
        ), text[-3000:]
        assert errors[0].endswith("the checkpoint is kept and rerunning the same command resumes")
        assert waited < 60, f"waited {waited:.0f} s for the lost server"
        assert list((tmp_path / "runs").glob("*/last.pt"))

        server = _start_server(port, folder)
        rerun = train(compose(*cmd))
        assert rerun.status == "FINISHED" and not rerun.reused
        _assert_one_run_every_point_once(cmd, rerun.run_id, reference)
    finally:
        _kill_server(server)
