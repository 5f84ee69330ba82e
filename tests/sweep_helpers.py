"""Helpers of the sweep tests: a sweep planned exactly as `python -m sweeps.run` plans it
(`tuned_plan`), a tiny tuned sweep file, its corpus and environment, the tags of planned runs.
The Hydra compose fixture of conf/run.yaml (`comp`) and its temporary store (`tmp_store`) are in
conftest.py."""

from __future__ import annotations

import sys
from pathlib import Path

from sweeps import batch_axis, driver, plan, rules, tuning
from training.checkpoint import branch_checkpoint_path


def tuned_plan(comp, arguments):
    """The tuning plan `python -m sweeps.run ARGS` makes, built as the driver builds it."""
    cfg = comp(arguments)
    fixed, axes, keys = driver.parse_cli(arguments)
    spec = driver.spec_from_config(cfg, axes)
    spec.check_conflicts(keys)
    fast = driver.cached_compose(comp)
    facts_of = lambda ov: driver.facts(fast([*fixed, *ov]))  # noqa: E731
    ckpt = lambda key, t: str(branch_checkpoint_path(Path("/ckpt"), key, t))  # noqa: E731
    resolve = lambda pts: plan.resolve(spec, pts, facts_of, ckpt, flops_per_sec=1e9)  # noqa: E731
    points = rules.apply_rules(spec, plan.expand(spec), facts_of)
    runs = resolve(batch_axis.with_granule(spec, points, facts_of))
    if spec.tune is None:
        return spec, runs, None
    config_of = lambda o: fast([*fixed, *o])  # noqa: E731
    tp = tuning.plan_tuning(spec.tune, runs, config_of, ckpt, resolve, 1e9, 0.0, seeds=spec.seeds)
    return spec, runs, tp


# conf/sweep/grid.yaml: llama, 3 sizes x 4 token budgets (61-488 steps)
TINY = [
    "sweep=grid",
    "+sweep.tune={train.lr:[1e-4,3e-4,1e-3,2e-3,4e-3,8e-3,1.6e-2,3.2e-2]}",
]


def _tag(run, name: str) -> str | None:
    found = [o for o in run.overrides if o.startswith(f"++tracking.tags.{name}=")]
    return found[0].split("=", 1)[1].strip("'") if found else None


TEXT = (
    "The quick brown fox jumps over the lazy dog. A scaling law relates loss to compute. "
    "Attention is all you need, said the paper, and the block became the standard. "
)


def sweep_file(halving: str) -> str:
    # one arm, 32 steps; learning rates 4x to 64x apart, so the loss orders them clearly
    return f"""
axes:
  model: [llama]
  model.size: [1e4]
  train.tokens: [16384]
fixed:
  data.source: text
  data.tokenizer: byte
  data.eval_tokens: 2048
  data.val_fraction: 0.3
  train.batch_tokens: 512
  train.seq_len: 64
  train.eval_every: 1000
  train.log_every: 5
tune:
  train.lr: [2.5e-4, 1e-3, 6.4e-2, 1.0]
tune_halving: {halving}
"""


def _corpus(tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for i in range(20):  # several documents so both splits are non-empty
        (corpus / f"doc{i}.txt").write_text(f"document {i}. " + TEXT * 40)
    return corpus


def _env(tmp_path):
    import os

    env = dict(os.environ)
    env.update(
        MLFLOW_TRACKING_URI=f"sqlite:///{tmp_path / 'mlruns.db'}",
        SCALING_LAB_RUNS_DIR=str(tmp_path / "runs"),
        SCALING_LAB_CACHE_DIR=str(tmp_path / "cache"),
        PYTHONUNBUFFERED="1",
    )
    return env


def tiny_sweep(axes: str, extra_fixed: str = "") -> str:
    return f"""
axes:
{axes}
fixed:
  data.source: text
  data.tokenizer: byte
  data.eval_tokens: 2048
  data.val_fraction: 0.3
  train.batch_tokens: 1024
  train.seq_len: 64
  train.eval_every: 1000
  train.log_every: 5
{extra_fixed}
"""


def sweep_cmd(tmp, corpus, name, *args):
    return [
        sys.executable,
        "-m",
        "sweeps.run",
        "--config-dir",
        str(tmp),
        f"sweep={name}",
        f"data.path={corpus}",
        *args,
    ]


def runs(tmp):
    import mlflow

    mlflow.set_tracking_uri(f"sqlite:///{tmp / 'mlruns.db'}")
    return mlflow.search_runs(experiment_names=["scaling-lab"])
