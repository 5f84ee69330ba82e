"""Helpers of the training-loop tests: compose a config, read a run back from MLflow, wait for
a child process's files, start and finish `python -m training.train` processes. Their fixtures
(a tiny run's overrides, its corpus, store and cache) are in conftest.py."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections import Counter
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

# A child process's start-up (imports, data, first steps) takes seconds on a quiet machine and
# minutes on a saturated one: wait for what it produces or for its exit, under a deadline that
# only catches a hang.
HANG_DEADLINE_S = 900

METRICS = ("train_loss", "val_loss", "lr", "tokens_per_sec", "mfu")
LONG = ["train.tokens=51200", "train.checkpoint_every=20", "train.eval_every=50"]  # 200 steps


def compose(*overrides: str):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(str(ROOT / "conf"), version_base="1.3"):
        return hydra_compose("config", overrides=list(overrides))


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


def start(overrides: list[str], output: Path) -> subprocess.Popen:
    with open(output, "wb") as sink:
        return subprocess.Popen(
            [sys.executable, "-m", "training.train", *overrides],
            cwd=ROOT,
            env={**os.environ, "OMP_NUM_THREADS": "1"},
            stdout=sink,
            stderr=subprocess.STDOUT,
        )


def finish(proc: subprocess.Popen, output: Path, timeout_s: float = HANG_DEADLINE_S) -> int:
    try:
        return proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        pytest.fail(f"still running after {timeout_s} s:\n{output.read_text()[-3000:]}")


def steps_once(uri: str, run_id: str) -> dict[str, list[int]]:
    """Every metric's steps, asserting that none appears twice."""
    out = {}
    for key in METRICS:
        steps = [s for s, _ in history(uri, run_id, key)]
        doubled = {s: n for s, n in Counter(steps).items() if n > 1}
        assert not doubled, f"{key}: steps logged more than once: {doubled}"
        out[key] = sorted(steps)
    return out
