"""One training run end to end (`training.train`) on tiny models, seconds each, checked through
MLflow: what it records, the CLI, compile, two data-parallel ranks, and bad input that fails
before any work."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from train_helpers import (
    HANG_DEADLINE_S,
    ROOT,
    compose,
    history,
    run_launcher,
    runs_df,
    uri_of,
    value_of,
)

pytestmark = pytest.mark.usefixtures("one_thread")


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
    # the corpus's unigram entropy (nats/token): the loss of token frequencies alone
    _, counts = np.unique(np.asarray(data.train), return_counts=True)
    p = counts / counts.sum()
    assert float(row["params.data_unigram_entropy"]) == pytest.approx(-(p * np.log(p)).sum())
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
def test_compiled_run_matches_eager(lab, tmp_path):
    from training.train import train

    eager = train(
        compose(
            *lab,
            "train.compile=false",
            "tracking.experiment=eager",
            f"paths.runs_dir={tmp_path / 'e'}",
        )
    )
    compiled = train(compose(*lab, "train.compile=true"))
    assert compiled.status == eager.status == "FINISHED"
    assert compiled.final_val_loss == pytest.approx(eager.final_val_loss, rel=1e-4)
    assert compiled.final_train_loss == pytest.approx(eager.final_train_loss, rel=1e-4)


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
def test_cli_prints_result_and_writes_nothing_in_cwd(lab, tmp_path):
    work = tmp_path / "cwd"
    work.mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    out = subprocess.run(
        [sys.executable, "-m", "training.train", *lab, "train.tokens=2e3", "train.progress=auto"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "result: run_key=" in out.stdout and "status=FINISHED" in out.stdout
    assert "step 8/8" in out.stdout  # plain progress lines when not on a terminal
    assert list(work.iterdir()) == []  # no outputs/, .hydra/ or logs in the cwd
    bad = subprocess.run(
        [sys.executable, "-m", "training.train", *lab, "train.nope=1"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
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
