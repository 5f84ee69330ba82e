"""Plans of the shipped sweep configs through the real conf/ tree, Hydra compose and the factory.

These run `sweeps.driver.drive` in dry-run mode in-process (no subprocess, nothing trained): the
IsoFLOP token budgets must be C / (6 N) with the factory's N, every shipped sweep must plan, and
the dry run must not create an MLflow store.
"""

from pathlib import Path

import pytest
import yaml
from hydra import compose, initialize_config_dir

from models import count_params, flops_per_token
from models.ladder import model_config
from sweeps import driver, plan
from sweeps.sweep_view import plan_rows
from training.checkpoint import branch_checkpoint_path

CONF = Path(__file__).resolve().parents[1] / "conf"
SWEEPS = sorted(p.stem for p in (CONF / "sweep").glob("*.yaml"))


@pytest.fixture
def tmp_store(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlruns.db'}")
    monkeypatch.setenv("SCALING_LAB_RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.setenv("SCALING_LAB_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path


@pytest.fixture
def comp(tmp_store):
    """Hydra's compose API on conf/run.yaml: the config a job of `python -m sweeps.run` gets."""
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        yield lambda overrides: compose("run", overrides=list(overrides), return_hydra_config=True)


def plan_of(comp, arguments):
    """(spec, resolved runs) of `python -m sweeps.run ARGS`, planned exactly as the sweeper does."""
    cfg = comp(arguments)
    fixed, axes, keys = driver.parse_cli(arguments)
    spec = driver.spec_from_config(cfg, axes)
    spec.check_conflicts(keys)
    fast = driver.cached_compose(comp)
    runs = plan.resolve(
        spec,
        plan.expand(spec),
        lambda ov: driver.facts(fast([*fixed, *ov])),
        lambda key, t: str(branch_checkpoint_path(Path("/ckpt"), key, t)),  # the runs layout
        flops_per_sec=1e9,
    )
    return spec, runs


def test_isoflop_tokens_use_the_factorys_non_embedding_count(comp):
    spec, runs = plan_of(comp, ["sweep=isoflop"])
    assert spec.kind == "isoflop" and len(spec.budgets) >= 4
    llama = yaml.safe_load((CONF / "model" / "llama.yaml").read_text())
    for r in runs:
        if r.skip:
            continue
        size = float(next(o.split("=")[1] for o in r.overrides if o.startswith("model.size=")))
        n = count_params(
            model_config({**llama, "size": size, "vocab_size": 1024})
        ).non_embedding
        assert r.n == n
        assert r.d % 8192 == 0 and abs(r.d - r.budget / (6 * n)) <= 8192 / 2
        assert r.c == pytest.approx(r.budget, rel=0.05 if r.d > 8192 * 10 else 0.5)


def test_exact_budgets_use_the_factorys_exact_flops_at_the_configs_seq_len(comp):
    _, six = plan_of(comp, ["sweep=isoflop"])
    spec, runs = plan_of(comp, ["sweep=isoflop", "+sweep.budget_flops=exact"])
    assert spec.budget_flops == "exact"
    llama = yaml.safe_load((CONF / "model" / "llama.yaml").read_text())
    ran = 0
    for r, r6 in zip(runs, six):
        size = float(next(o.split("=")[1] for o in r.overrides if o.startswith("model.size=")))
        cfg = model_config({**llama, "size": size, "vocab_size": 1024, "max_seq_len": 128})
        per_token = flops_per_token(cfg, 128).exact  # isoflop.yaml: train.seq_len 128
        assert r.facts.flops_per_token == per_token > 6 * r.n
        if r.skip:
            assert "D = C/F_exact" in r.skip
            continue
        ran += 1
        assert r.d % 8192 == 0 and abs(r.c_exact - r.budget) <= per_token * 8192 / 2
        assert r.d < r6.d  # the 6ND plan trains more tokens than its budget pays for
    assert ran >= 4
    rows = plan_rows(runs)
    assert {row["budget_flops"] for row in rows} == {"exact"}
    assert all(row["C_exact"] == r.c_exact and row["C"] == r.c for row, r in zip(rows, runs))
    assert {row["budget_flops"] for row in plan_rows(six)} == {"6nd"}


def test_default_budget_convention_keeps_every_d_and_run_key(comp):
    _, default = plan_of(comp, ["sweep=isoflop"])
    _, explicit = plan_of(comp, ["sweep=isoflop", "+sweep.budget_flops=6nd"])
    same = [(r.run_key, r.d, r.skip) for r in explicit]
    assert same == [(r.run_key, r.d, r.skip) for r in default]
    for r in default:
        if not r.skip:
            assert r.d == round(r.budget / (6 * r.n) / 8192) * 8192


def test_a_bad_budget_convention_fails_the_plan_naming_the_field(comp):
    with pytest.raises(plan.PlanError, match=r"^sweep.budget_flops: expected one of 6nd, exact"):
        plan_of(comp, ["sweep=isoflop", "+sweep.budget_flops=chinchilla"])


def test_cached_compose_gives_the_same_config_as_a_full_compose(comp):
    _, runs = plan_of(comp, ["sweep=ablation"])
    for r in runs[:: max(1, len(runs) // 5)]:
        full = driver.facts(comp(["sweep=ablation", *r.overrides]))
        assert full == r.facts


@pytest.mark.parametrize("name", SWEEPS)
def test_every_shipped_sweep_plans(comp, name):
    spec, runs = plan_of(comp, [f"sweep={name}"])
    assert runs and all(r.facts for r in runs if not r.skip)
    assert len({r.run_key for r in runs if not r.skip}) == sum(1 for r in runs if not r.skip)
    if spec.wsd_tokens:
        spent, cosine = plan.wsd_compute(runs)
        assert 0 < spent < cosine


def test_demo_is_the_default_and_crosses_vanilla_and_llama(comp):
    assert comp([]).sweep.name == "demo"
    _, runs = plan_of(comp, [])
    assert {r.facts.arch for r in runs} == {
        "post-layernorm-sinusoidal-mha-gelu",
        "pre-rmsnorm-rope-gqa2-swiglu",
    }


def test_a_bad_training_override_fails_the_plan_naming_the_key(comp):
    with pytest.raises(plan.PlanError, match="train.lr"):
        plan_of(comp, ["sweep=tiny", "train.lr=-1"])
    with pytest.raises(plan.PlanError, match="model.size and model.d_model"):
        plan_of(comp, ["sweep=tiny", "model.d_model=64"])


def test_dry_run_creates_no_store(comp, tmp_store, capsys):
    args = ["sweep=wsd", "sweep.dry_run=true"]

    def launch(batch, idx):
        raise AssertionError("a dry run must not launch jobs")

    assert driver.drive(comp(args), args, comp, launch) == []
    out = capsys.readouterr().out
    assert "compute saved" in out and "dry run: nothing trained" in out
    assert not (tmp_store / "mlruns.db").exists() and not (tmp_store / "runs").exists()


def test_dry_run_names_the_convention_next_to_every_c(comp, capsys):
    args = ["sweep=isoflop", "sweep.dry_run=true", "+sweep.budget_flops=exact"]
    assert driver.drive(comp(args), args, comp, launch=None) == []
    out = capsys.readouterr().out
    assert "budgets C in exact FLOPs" in out
    assert "C (6ND)" in out and "C (exact)" in out
    assert "FLOPs (6ND)" in out and "FLOPs (exact)" in out


def test_the_families_sweep_plans_each_familys_n_d_and_c(comp):
    """Family is an axis: each family's N is the factory's count of its model, D the train.tokens
    of its windows (as every family counts them), C that of its objective: 6 N D for decoder and
    encoder, both stacks' 6 (N_enc S + N_dec T) per sequence for encoder_decoder."""
    from models import flops_per_sequence

    _, runs = plan_of(comp, ["sweep=families"])
    by_family = {}
    for r in runs:
        assert not r.skip
        family = dict(o.split("=", 1) for o in r.overrides)["model.family"]
        by_family.setdefault(family, []).append(r)
        point = dict(o.split("=", 1) for o in r.overrides)
        vanilla = yaml.safe_load((CONF / "model" / "vanilla.yaml").read_text())
        cfg = model_config({**vanilla, "family": family, "size": float(point["model.size"]),
                            "vocab_size": 1024 + {"decoder": 0, "encoder": 1,
                                                  "encoder_decoder": 7}[family],
                            "max_seq_len": 128})  # fmt: skip  (seq2seq: 6 spans + a start)
        pc = count_params(cfg)
        assert r.n == pc.non_embedding and r.d == float(point["train.tokens"])
        if family == "encoder_decoder":  # 128 tokens: 19 noise in 6 spans -> 115 + 25
            fl = flops_per_sequence(cfg, 25, src_len=115)
            assert r.c == pytest.approx(6 * (pc.encoder * 115 + pc.decoder * 25) * r.d / 128)
            assert r.c_exact == pytest.approx(fl.exact * r.d / 128)
        else:
            assert r.c == 6 * pc.non_embedding * r.d
            assert r.c_exact == flops_per_token(cfg, 128).exact * r.d
    assert sorted(by_family) == ["decoder", "encoder", "encoder_decoder"]
    assert all(len(v) == 9 for v in by_family.values())
