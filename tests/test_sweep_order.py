"""`sweep.interleave`: the variants' points start in turn (A B, B A, ...), the plan unchanged."""

import os
import subprocess
import sys

import pytest

from sweeps.order import interleaved
from sweeps.plan import PlannedRun


def planned(index: int, variant: str) -> PlannedRun:
    return PlannedRun(index=index, overrides=(), variant=variant, phase="run", facts=None)


def test_variants_take_turns_and_every_other_round_is_reversed():
    runs = [planned(0, "a"), planned(1, "a"), planned(2, "a")]
    runs += [planned(3, "b"), planned(4, "b"), planned(5, "b")]
    runs += [planned(6, "c"), planned(7, "c")]  # a variant with fewer points drops out
    order = [r.index for r in interleaved(runs)]
    assert order == [0, 3, 6, 7, 4, 1, 2, 5]
    assert sorted(order) == list(range(8))  # every point once


def test_one_variant_keeps_the_plan_order():
    runs = [planned(i, "base") for i in range(4)]
    assert interleaved(runs) == runs
    assert interleaved([]) == []


def test_a_bad_value_is_one_error_line_before_any_store(tmp_path):
    env = dict(os.environ, MLFLOW_TRACKING_URI=f"sqlite:///{tmp_path / 'mlruns.db'}")
    out = subprocess.run(
        [sys.executable, "-m", "sweeps.run", "sweep=tiny", "sweep.interleave=maybe"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2
    assert out.stderr.strip().splitlines()[-1] == (
        "error: sweep.interleave: expected true or false, got 'maybe'"
    )
    assert not (tmp_path / "mlruns.db").exists()


TEXT = "The quick brown fox jumps over the lazy dog. A scaling law relates loss to compute. "
SWEEP = """
axes:
  train.tokens: [2048, 4096]
variants:
  base: {}
  mqa: {model.n_kv_heads: 1}
fixed:
  model.size: 1e4
  data.source: text
  data.tokenizer: byte
  data.eval_tokens: 1024
  data.val_fraction: 0.3
  train.batch_tokens: 1024
  train.seq_len: 64
  train.eval_every: 1000
  train.log_every: 1
interleave: true
"""


@pytest.mark.slow
def test_an_interleaved_sweep_starts_the_variants_in_turn(tmp_path):
    """Four real runs, one at a time: MLflow's start times give base, mqa, mqa, base."""
    import mlflow  # lazy: ~2.5 s to import, and only this slow test reads the store

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for i in range(10):
        (corpus / f"doc{i}.txt").write_text(f"document {i}. " + TEXT * 40)
    (tmp_path / "sweep").mkdir()
    (tmp_path / "sweep" / "t.yaml").write_text(SWEEP)
    uri = f"sqlite:///{tmp_path / 'mlruns.db'}"
    env = dict(
        os.environ,
        MLFLOW_TRACKING_URI=uri,
        SCALING_LAB_RUNS_DIR=str(tmp_path / "runs"),
        SCALING_LAB_CACHE_DIR=str(tmp_path / "cache"),
    )
    cmd = [sys.executable, "-m", "sweeps.run", "--config-dir", str(tmp_path), "sweep=t"]
    out = subprocess.run(
        [*cmd, f"data.path={corpus}"], env=env, capture_output=True, text=True, timeout=600
    )
    assert out.returncode == 0, out.stderr[-2000:]
    mlflow.set_tracking_uri(uri)
    kids = mlflow.search_runs(experiment_names=["scaling-lab"]).dropna(subset=["tags.run_key"])
    kids = kids.sort_values("start_time")
    arms = [
        ("mqa" if n == "1" else "base", int(float(t)))
        for n, t in zip(kids["params.model.n_kv_heads"], kids["params.train.tokens"])
    ]
    assert arms == [("base", 2048), ("mqa", 2048), ("mqa", 4096), ("base", 4096)]
