"""Batch size as a tuned axis (`sweep.tune: {train.batch_tokens: [...]}`), through the driver's
own plan (`driver.Sweep.make_plan`, what `python -m sweeps.run` builds) and its dry run, then a
tiny real sweep trained by successive halving and as the full grid.

Every candidate must train its arm's token budget D in D / B steps of its own batch B, with the
decay start and the rungs in whole batches of every candidate.
"""

import os
import subprocess
import sys
from pathlib import Path

import mlflow
import pytest
from hydra import compose, initialize_config_dir

from sweeps import driver, plan, tuning

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"

GRID = """
axes:
  model: [llama]
  model.size: [1.5e4, 3.4e4]
  train.tokens: [1e5, 2.5e5]
fixed:
  data.vocab_size: 1024
  train.seq_len: 128
  train.warmup: 0.02
tune:
  train.lr: [4e-3, 1.6e-2]
  train.batch_tokens: [512, 1024, 2048]
"""


@pytest.fixture
def comp(tmp_path, monkeypatch):
    """Compose like `python -m sweeps.run --config-dir tmp_path`: conf/ plus tmp_path/sweep."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlruns.db'}")
    monkeypatch.setenv("SCALING_LAB_RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.setenv("SCALING_LAB_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "sweep").mkdir()
    (tmp_path / "sweep" / "bgrid.yaml").write_text(GRID)
    search = f"hydra.searchpath=[file://{tmp_path}]"
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        yield lambda o: compose("run", overrides=[search, *o], return_hydra_config=True)


def make_plan(comp, args):
    """(first-stage runs, tuning plan) as the driver makes them."""
    return driver.Sweep.from_cli(comp(args), args, comp).make_plan()


def batch_of(run) -> int:
    return run.facts.batch_tokens


def test_halving_gives_every_candidate_its_batch_at_the_arms_token_budget(comp):
    runs, tp = make_plan(comp, ["sweep=bgrid", "+sweep.tune_halving={rungs:[0.25,0.5]}"])
    assert len(tp.arms) == 4 and len(tp.spec.candidates) == 6
    for arm in tp.arms:
        # D, the decay start and the rungs: whole batches of 2048 (the lcm) so of every batch
        assert arm.tokens % 2048 == 0 and arm.stable % 2048 == 0
        assert all(r % 2048 == 0 for r in arm.rungs)
        assert abs(arm.tokens - float(arm.run.overrides[-1].split("=")[1])) < 2048
        for cand in arm.candidates:
            assert cand.batch_tokens == cand.values["train.batch_tokens"]
            steps = arm.tokens // cand.batch_tokens
            assert cand.warmup_steps == round(0.02 * steps)  # 2% of its own steps
    assert {batch_of(r) for r in runs} == {512, 1024, 2048}
    for r in runs:  # first rung: every candidate trains the same tokens, in its own steps
        arm = next(a for a in tp.arms if f"arm='{a.id}'" in " ".join(r.overrides))
        assert r.d == arm.rungs[0]
        assert f"train.decay_start_tokens={arm.stable}" in r.overrides


def test_full_grid_trains_each_candidate_to_the_budget_in_d_over_b_steps(comp):
    runs, tp = make_plan(comp, ["sweep=bgrid", "+sweep.tune_halving=false"])
    assert len(runs) == 4 * 6 and len({r.run_key for r in runs}) == 24
    for r in runs:
        assert r.d % batch_of(r) == 0  # D / B whole steps, the budget exactly
    by_arm = {}
    for r in runs:
        by_arm.setdefault(r.d, set()).add(batch_of(r))
    assert all(b == {512, 1024, 2048} for b in by_arm.values())
    # tune_at smallest_budget: the larger budget trains the chosen batch later (a transfer)
    _, tp = make_plan(
        comp, ["sweep=bgrid", "+sweep.tune_halving=false", "+sweep.tune_at=smallest_budget"]
    )
    assert sum(a.tuned for a in tp.arms) == 2 and all(a.tokens % 2048 == 0 for a in tp.arms)


def test_isoflop_budgets_round_d_to_whole_batches_of_every_candidate(comp):
    (Path(os.environ["SCALING_LAB_RUNS_DIR"]).parent / "sweep" / "biso.yaml").write_text(
        GRID.replace("  train.tokens: [1e5, 2.5e5]\n", "budgets: [3e10, 1e11]\n")
    )
    runs, tp = make_plan(comp, ["sweep=biso", "+sweep.tune_halving=false"])
    for arm in tp.arms:
        ideal = arm.run.budget / arm.run.facts.six_n
        assert arm.tokens % 2048 == 0 and abs(arm.tokens - ideal) <= 1024
    assert all(r.d % batch_of(r) == 0 for r in runs)


def test_the_dry_run_shows_the_batch_axis(comp, capsys, tmp_path):
    args = ["sweep=bgrid", "+sweep.tune_halving=false", "sweep.dry_run=true"]
    assert driver.drive(comp(args), args, comp, launch=None) == []
    out = capsys.readouterr().out
    assert "6 candidates of train.lr, train.batch_tokens" in out
    assert "batch axis: train.batch_tokens in 512, 1024, 2048 tokens" in out
    assert "whole batches of 2048 tokens" in out
    assert "D 100K: 196, 98, 49" in out  # steps per candidate at D = 49 x 2048 = 100352
    assert not (tmp_path / "mlruns.db").exists()


@pytest.mark.parametrize(
    "values, message",
    [
        ("[512,-1024]", "expected positive whole token counts, got -1024"),
        ("[0,512]", "expected positive whole token counts, got 0"),
        ("[512,1000.5]", "expected positive whole token counts, got 1000.5"),
        ("[512,1000]", "1000 is not a multiple of train.seq_len=128"),
        ("[512,262144]", "262144 is larger than the token budget D = 100000"),
    ],
)
def test_a_bad_batch_is_one_error_naming_the_field(comp, tmp_path, values, message):
    args = ["sweep=bgrid", f"sweep.tune={{train.batch_tokens:{values}}}"]
    with pytest.raises(plan.PlanError) as e:
        make_plan(comp, args)
    assert str(e.value).startswith(f"sweep.tune.train.batch_tokens: {message}")
    assert "\n" not in str(e.value)
    assert not (tmp_path / "mlruns.db").exists()


TEXT = (
    "The quick brown fox jumps over the lazy dog. A scaling law relates loss to compute. "
    "Attention is all you need, said the paper, and the block became the standard. "
)

TINY = """
axes:
  model: [llama]
  model.size: [1e4]
  train.tokens: [16384]
fixed:
  data.source: text
  data.tokenizer: byte
  data.eval_tokens: 2048
  data.val_fraction: 0.3
  train.seq_len: 64
  train.warmup: 0.05
  train.eval_every: 1000
  train.log_every: 4
tune:
  train.lr: [1e-3, 1.6e-2]
  train.batch_tokens: [256, 1024]
tune_halving: {halving}
"""


def _run_sweep(tmp_path, name: str, corpus: Path) -> str:
    env = dict(os.environ)
    env.update(
        MLFLOW_TRACKING_URI=f"sqlite:///{tmp_path / 'mlruns.db'}",
        SCALING_LAB_RUNS_DIR=str(tmp_path / "runs"),
        SCALING_LAB_CACHE_DIR=str(tmp_path / "cache"),
        PYTHONPATH=str(ROOT),
    )
    cmd = [sys.executable, "-m", "sweeps.run", "--config-dir", str(tmp_path), f"sweep={name}"]
    cmd += [f"data.path={corpus}", "sweep.jobs=2"]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return out.stdout


@pytest.mark.slow
def test_a_tiny_lr_x_batch_sweep_trains_the_budget_and_halving_replays_the_grid(tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for i in range(20):
        (corpus / f"doc{i}.txt").write_text(f"document {i}. " + TEXT * 40)
    (tmp_path / "sweep").mkdir()
    (tmp_path / "sweep" / "bfull.yaml").write_text(TINY.replace("{halving}", "false"))
    (tmp_path / "sweep" / "bhalving.yaml").write_text(TINY.replace("{halving}", "{rungs: [0.5]}"))
    _run_sweep(tmp_path, "bfull", corpus)
    _run_sweep(tmp_path, "bhalving", corpus)
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'mlruns.db'}")
    df = mlflow.search_runs(experiment_names=["scaling-lab"]).dropna(subset=["tags.run_key"])
    grid, halving = df[df["tags.sweep"] == "bfull"], df[df["tags.sweep"] == "bhalving"]
    assert len(grid) == 4 and set(grid["status"]) == {"FINISHED"}
    for _, r in grid.iterrows():  # the budget, in D / B steps of the run's own batch
        batch = int(r["params.train.batch_tokens"])
        assert r["metrics.tokens_consumed"] == 16384
        assert f"train.batch_tokens={batch}" in r["tags.tune_values"]
    losses = {r["tags.tune_values"]: r["metrics.final_val_loss"] for _, r in grid.iterrows()}
    assert len(set(losses.values())) == 4  # four different runs
    best = min(losses, key=losses.get)
    assert list(grid[grid["tags.tune_role"] == "chosen"]["tags.tune_values"]) == [best]
    # halving: segments at the rung, then the winner decays to D; with its own batch its
    # segments and decay are the trajectory of its full-grid run
    chosen = halving[halving["tags.tune_role"] == "chosen"]
    assert len(chosen) == 1 and chosen["metrics.tokens_consumed"].iloc[0] == 16384
    value = chosen["tags.tune_values"].iloc[0]
    assert chosen["metrics.final_val_loss"].iloc[0] == pytest.approx(losses[value], abs=1e-3)


def test_an_extended_full_grid_keeps_one_chosen_run_per_arm(tmp_path):
    """A rerun that adds candidates (ref_hparams added two lrs) may find a better run: that
    one is tagged chosen and the earlier choice goes back to candidate."""
    uri = f"sqlite:///{tmp_path / 'mlruns.db'}"
    client = mlflow.tracking.MlflowClient(uri)
    exp = client.create_experiment("grid")
    keys = ["k-old-best", "k-other", "k-new"]
    for key, role in zip(keys, ["chosen", "candidate", "candidate"]):
        run = client.create_run(exp, tags={"run_key": key, "tune_role": role})
        client.set_terminated(run.info.run_id, "FINISHED")
    members = [
        (plan.PlannedRun(i, (), "base", "candidate", _facts(k)), i) for i, k in enumerate(keys)
    ]
    tuning.tag_chosen_in_mlflow(uri, "grid")(members, 2)
    roles = {r.data.tags["run_key"]: r.data.tags["tune_role"] for r in client.search_runs([exp])}
    assert roles == {"k-old-best": "candidate", "k-other": "candidate", "k-new": "chosen"}


def _facts(key: str) -> plan.RunFacts:
    return plan.RunFacts(key, "a", 1, 8, 100, 80, 1e3, 8192.0, 1024)
