"""End-to-end training runs on tiny models (seconds each), checked through MLflow."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TINY = [
    "model.d_model=32",
    "model.n_layers=2",
    "model.n_heads=2",
    "model.n_kv_heads=1",
    "train.seq_len=32",
    "train.batch_tokens=256",
    "train.tokens=8192",  # 32 steps
    "train.warmup=4",
    "train.log_every=4",
    "train.eval_every=8",
    "train.progress=none",
    "data.eval_tokens=1024",
    "data.tokenizer=byte",
]


def compose(*overrides: str):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(str(ROOT / "conf"), version_base="1.3"):
        return hydra_compose("config", overrides=list(overrides))


@pytest.fixture(scope="session")
def corpus(tmp_path_factory) -> Path:
    """60 small stdlib files as a text corpus (real code and prose, ~300 KB)."""
    from training.data import stdlib_files

    folder = tmp_path_factory.mktemp("corpus")
    small = [(rel, p) for rel, p in stdlib_files() if 2_000 < p.stat().st_size < 8_000][:60]
    for i, (_, p) in enumerate(small):
        (folder / f"doc{i:03d}.txt").write_text(p.read_text(encoding="utf-8"), encoding="utf-8")
    return folder


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(scope="session", autouse=True)
def one_thread():
    """Tiny models on a shared 2-core machine: intra-op threads only add contention."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def store(tmp_path_factory) -> str:
    """One SQLite store for the session (creating one costs seconds); tests use their own
    experiment in it."""
    return f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlruns.db'}"


@pytest.fixture
def lab(tmp_path, corpus, cache_dir, store) -> list[str]:
    """Overrides that send tracking, checkpoints and caches to temporary places."""
    return [
        f"tracking.uri={store}",
        f"tracking.experiment={tmp_path.name}",
        f"paths.runs_dir={tmp_path / 'runs'}",
        f"paths.cache_dir={cache_dir}",
        "data.source=text",
        f"data.path={corpus}",
        *TINY,
    ]


def runs_df(overrides: list[str]):
    import mlflow

    mlflow.set_tracking_uri(value_of(overrides, "tracking.uri"))
    return mlflow.search_runs(experiment_names=[value_of(overrides, "tracking.experiment")])


def history(uri: str, run_id: str, key: str) -> list[tuple[int, float]]:
    from mlflow.tracking import MlflowClient

    return [(m.step, m.value) for m in MlflowClient(uri).get_metric_history(run_id, key)]


def value_of(overrides: list[str], key: str) -> str:
    return [o.split("=", 1)[1] for o in overrides if o.startswith(key + "=")][-1]


def uri_of(overrides: list[str]) -> str:
    return value_of(overrides, "tracking.uri")


# A child process's start-up (imports, data, first steps) takes seconds on a quiet machine and
# minutes on a saturated one: wait for what it produces or for its exit, under a deadline that
# only catches a hang.
HANG_DEADLINE_S = 900


def wait_for_file(folder: Path, pattern: str, proc, output: Path, timeout_s: float) -> Path:
    """The first file matching `pattern` under `folder` once it exists; fails with the child's
    output if `proc` exits first or nothing appears within `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while not (found := sorted(folder.glob(pattern))):
        if proc.poll() is not None:
            tail = output.read_text(errors="replace")[-3000:]
            pytest.fail(f"exited ({proc.returncode}) before {pattern} appeared:\n{tail}")
        if time.monotonic() > deadline:
            tail = output.read_text(errors="replace")[-3000:]
            pytest.fail(f"no {pattern} under {folder} after {timeout_s} s:\n{tail}")
        time.sleep(0.02)
    return found[0]


def run_launcher(cmd: list[str], timeout_s: float, **kwargs) -> subprocess.CompletedProcess:
    """`subprocess.run(cmd, capture_output=True, text=True)` for a launcher of workers (torchrun).

    On timeout subprocess.run SIGKILLs the launcher alone: torchrun starts each rank in its own
    session, so the ranks would keep running (and writing to the store) after the test. SIGTERM
    instead makes torchrun stop its ranks; then the test fails with their output."""
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs
    )
    try:
        stdout, stderr = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.terminate()
        try:
            stdout, stderr = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            stdout, stderr = proc.communicate()
        pytest.fail(
            f"{cmd[:4]} still running after {timeout_s} s:\n{stdout[-2000:]}{stderr[-2000:]}"
        )
    return subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr)


@pytest.mark.slow
@pytest.mark.parametrize("schedule", ["cosine", "wsd", "constant"])
def test_tiny_run_records_schema(lab, schedule):
    from training.train import train

    result = train(
        compose(*lab, f"train.schedule={schedule}", "tracking.tags={sweep: t, variant: base}")
    )
    assert result.status == "FINISHED" and result.tokens_consumed == 8192 and result.steps == 32
    df = runs_df(lab)
    assert len(df) == 1
    row = df.iloc[0]
    assert row["status"] == "FINISHED"
    assert row["tags.arch"] == "pre-rmsnorm-rope-mqa-swiglu"
    assert row["tags.run_key"] == result.run_key and row["tags.variant"] == "base"
    assert row["tags.data_fingerprint"].startswith("text-") and row["tags.git_commit"]
    assert row["params.model.d_model"] == "32" and row["params.train.schedule"] == schedule
    assert row["params.model.vocab_size"] == "256" and row["params.tokens"] == "8192"
    n_nonembed = int(row["params.n_params_nonembed"])
    assert int(row["params.flops_6nd"]) == 6 * n_nonembed * 8192
    assert float(row["params.flops_exact"]) > 0
    assert row["metrics.final_val_loss"] == pytest.approx(result.final_val_loss)
    assert row["metrics.tokens_consumed"] == 8192 and row["metrics.epochs"] > 0
    # the split's size, so that analysis computes epochs = tokens_trained / data_train_tokens
    from training.data import prepare_data
    from training.spec import resolve_config

    spec = resolve_config(compose(*lab))
    data = prepare_data(spec.data, Path(value_of(lab, "paths.cache_dir")))
    assert row["params.data_train_tokens"] == str(len(data.train))
    assert row["params.data_val_tokens"] == str(len(data.val))
    assert row["metrics.epochs"] == pytest.approx(8192 / len(data.train))
    assert row["params.torch_threads"] == "1"  # the one_thread fixture
    for key in ("train_loss", "val_loss", "lr", "tokens_per_sec", "mfu"):
        assert not math.isnan(row[f"metrics.{key}"]), key
    steps = [s for s, _ in history(uri_of(lab), result.run_id, "train_loss")]
    assert steps == [256 * k for k in range(4, 33, 4)]  # step axis = tokens seen
    lrs = [v for _, v in history(uri_of(lab), result.run_id, "lr")]
    if schedule == "constant":
        assert lrs == pytest.approx([1e-3] * len(lrs))
    else:  # cosine and wsd both end at lr * min_lr_ratio
        assert lrs[-1] == pytest.approx(1e-4, rel=0.2) and lrs[1] == pytest.approx(1e-3, rel=0.05)
    assert result.final_val_loss < math.log(256)  # it learned something


@pytest.mark.slow
def test_same_config_in_a_second_experiment_trains_in_full_and_rerun_reuses(lab):
    """Checkpoints are shared by run key (one runs folder for every experiment): the second
    experiment's run trains every step instead of resuming the first one's final checkpoint,
    with the same losses; a rerun in the first experiment reuses its run. D is what was
    trained: 8000 tokens asked for are 32 whole batches of 256 = 8192."""
    from analysis.load import load_mlflow
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
    with pytest.raises(ConfigError, match=f"train.resume=true: .* written by MLflow run "
                                          f"{second.run_id}, not by run key"):  # fmt: skip
        train(compose(*cfg, "tracking.experiment=third", "train.resume=true"))
    row = runs_df(other).iloc[0]
    assert row["params.tokens"] == "8000" and row["params.tokens_trained"] == "8192"
    assert int(row["params.flops_6nd"]) == 6 * int(row["params.n_params_nonembed"]) * 8192
    assert row["tags.data_source"].startswith("text-")
    loaded = load_mlflow("elsewhere", tracking_uri=uri).frame
    assert list(loaded["D"]) == [8192] and list(loaded["run_id"]) == [second.run_id]


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
def test_compiled_run_matches_eager(lab, tmp_path):
    from training.train import train

    eager = train(compose(*lab, "train.compile=false", "tracking.experiment=eager",
                          f"paths.runs_dir={tmp_path / 'e'}"))  # fmt: skip
    compiled = train(compose(*lab, "train.compile=true"))
    assert compiled.status == eager.status == "FINISHED"
    assert compiled.final_val_loss == pytest.approx(eager.final_val_loss, rel=1e-4)
    assert compiled.final_train_loss == pytest.approx(eager.final_train_loss, rel=1e-4)


@pytest.mark.slow
def test_nan_loss_fails_run_and_keeps_metrics(lab):
    from training.train import train

    result = train(compose(*lab, "train.lr=1e9", "train.grad_clip=0", "train.warmup=0"))
    assert result.status == "FAILED" and result.failure_reason.startswith("diverged at step ")
    row = runs_df(lab).iloc[0]
    assert row["status"] == "FAILED" and row["tags.failure_reason"] == result.failure_reason
    assert "metrics.train_loss" in row and row["params.train.lr"] == "1000000000.0"


def test_unreachable_server_fails_fast_before_data(lab, tmp_path):
    import socket

    from training.tracking import TrackingUnavailable
    from training.train import train

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cache = tmp_path / "fresh-cache"
    t0 = time.time()
    with pytest.raises(TrackingUnavailable, match="not reachable"):
        train(compose(*lab, f"tracking.uri=http://127.0.0.1:{port}", f"paths.cache_dir={cache}"))
    assert time.time() - t0 < 10 and not cache.exists()


@pytest.mark.parametrize(
    "override, field",
    [
        ("model.n_heads=3", "model: n_heads"),
        ("train.tokens=2.5", "train.tokens"),
        ("train.micro_batch=3", "train.micro_batch"),
        ("train.schedule=linear", "train.schedule"),
        ("train.batch_tokens=100", "train.batch_tokens"),
    ],
)
def test_invalid_overrides_fail_before_data(lab, tmp_path, override, field):
    from training.config import ConfigError
    from training.train import train

    cache = tmp_path / "fresh-cache"
    with pytest.raises(ConfigError) as err:
        train(compose(*lab, override, f"paths.cache_dir={cache}"))
    assert str(err.value).startswith(field)
    assert not cache.exists() and not (tmp_path / "runs").exists()


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
def test_cli_prints_result_and_writes_nothing_in_cwd(lab, tmp_path):
    work = tmp_path / "cwd"
    work.mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    out = subprocess.run(
        [sys.executable, "-m", "training.train", *lab, "train.tokens=2e3", "train.progress=auto"],
        cwd=work, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    assert "result: run_key=" in out.stdout and "status=FINISHED" in out.stdout
    assert "step 8/8" in out.stdout  # plain progress lines when not on a terminal
    assert list(work.iterdir()) == []  # no outputs/, .hydra/ or logs in the cwd
    bad = subprocess.run(
        [sys.executable, "-m", "training.train", *lab, "train.nope=1"],
        cwd=work, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert bad.returncode != 0 and "nope" in bad.stderr


@pytest.mark.slow
def test_two_cpu_ranks_form_one_data_parallel_run_equal_to_one_process(lab, tmp_path):
    """torchrun with 2 CPU ranks (gloo): one MLflow run with world_size 2, written by the main
    process only, and the same global batch gives the single-process losses (up to all-reduce
    rounding)."""
    from training.train import train

    single = train(compose(*lab, "tracking.experiment=single", f"paths.runs_dir={tmp_path / 's'}"))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
    out = run_launcher(
        [*cmd, "-m", "training.train", *lab],
        timeout_s=HANG_DEADLINE_S,
        cwd=ROOT,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    df = runs_df(lab)
    assert len(df) == 1 and df.iloc[0]["status"] == "FINISHED"
    assert df.iloc[0]["params.world_size"] == "2" and df.iloc[0]["params.micro_batch"] == "4"
    assert df.iloc[0]["metrics.final_val_loss"] == pytest.approx(single.final_val_loss, rel=1e-5)
