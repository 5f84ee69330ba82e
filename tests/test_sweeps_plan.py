"""sweeps.plan: a sweep config becomes points, then planned runs.

The first part checks each rule in isolation as pure functions (grids, IsoFLOP arithmetic,
ablations, WSD branches, conflicts) with a small fake resolver standing in for Hydra + the model
factory (N = model.size, or 12 L d^2 for explicit shapes). The second part plans the shipped
sweep configs through the real conf/ tree, Hydra compose and the factory: `sweeps.driver.drive`'s
steps in dry-run mode in-process (no subprocess, nothing trained): the IsoFLOP token budgets must
be C / (6 N) with the factory's N, every shipped sweep must plan, and the dry run must not create
an MLflow store.
"""

import hashlib
import re
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from models import count_params, flops_per_sequence, flops_per_token
from models.ladder import model_config
from sweeps import driver, plan
from sweeps.plan import (
    PlanError,
    RunFacts,
    SweepSpec,
    branch_start,
    expand,
    format_value,
    resolve,
    total_estimate,
    waves,
    wsd_compute,
)
from sweeps.sweep_view import plan_rows
from training.checkpoint import branch_checkpoint_path

BATCH = 1024


def fake_facts(overrides):
    d = dict(o.split("=", 1) for o in overrides)
    if "model.size" in d:
        size = float(d["model.size"])
        if size > 1e8:
            raise ValueError("model.size: the ladder cannot build 1e9 (largest is 1e8)")
        n, layers, width = int(size), 4, 64
    else:
        layers, width = int(d.get("model.n_layers", 2)), int(d.get("model.d_model", 64))
        n = 12 * layers * width**2
    keyed = sorted(o for o in overrides if not o.startswith("train.save_at_tokens"))
    return RunFacts(
        run_key=hashlib.sha256(" ".join(keyed).encode()).hexdigest()[:16],
        arch=d.get("model", "llama"),
        n_layers=layers,
        d_model=width,
        n_params=n + 1000,
        n_params_nonembed=n,
        flops_per_token=6.0 * n,
        tokens=float(d.get("train.tokens", 1e6)),
        batch_tokens=BATCH,
    )


def ckpt(key, tokens):
    return f"/runs/{key}/tokens_{tokens}.pt"


def fake_plan(d, cli=()):
    spec = SweepSpec.from_dict("t", d)
    spec.check_conflicts(cli)
    return spec, resolve(spec, expand(spec), fake_facts, ckpt, flops_per_sec=1e9, overhead_s=2.0)


def test_grid_crosses_every_axis_in_order():
    spec, runs = fake_plan(
        {"axes": {"model": ["vanilla", "llama"], "model.size": [1e5, 2e5], "train.seed": [0, 1]}}
    )
    assert len(runs) == 8
    assert runs[0].overrides == ("model=vanilla", "model.size=100000", "train.seed=0")
    assert runs[-1].overrides == ("model=llama", "model.size=200000", "train.seed=1")
    assert len({r.run_key for r in runs}) == 8
    assert spec.kind == "grid"
    assert all(r.c == 6 * r.n * r.d for r in runs)


def test_format_value_writes_hydra_override_text():
    assert format_value(3e6) == "3000000"
    assert format_value(1e-3) == "0.001"
    assert format_value([1e3, 2e3]) == "[1000,2000]"
    assert format_value(None) == "null"
    assert format_value(True) == "true"


def test_isoflop_tokens_are_c_over_6n_in_whole_batches():
    _, runs = fake_plan({"axes": {"model.size": [1e5, 3e5]}, "budgets": [1e13, 3e13]})
    assert [r.budget for r in runs] == [1e13, 3e13, 1e13, 3e13]
    for r in runs:
        exact = r.budget / (6 * r.n)
        assert r.d % BATCH == 0
        assert abs(r.d - exact) <= BATCH / 2
        assert f"train.tokens={int(r.d)}" in r.overrides


def test_isoflop_point_below_one_batch_is_skipped_with_reason():
    _, runs = fake_plan({"axes": {"model.size": [1e5, 1e8]}, "budgets": [1e11]})
    small, big = runs
    assert small.skip is None
    assert "below one batch" in big.skip
    assert big.est_s == 0.0


def test_isoflop_tokens_per_param_window_skips_the_far_wings():
    spec = {"axes": {"model.size": [1e5, 3e5]}, "budgets": [1e12], "tokens_per_param": [10, 30]}
    _, runs = fake_plan(spec)
    ratios = [r.budget / (6 * r.n) / r.n for r in runs]
    for r, ratio in zip(runs, ratios):
        if 10 <= ratio <= 30:
            assert r.skip is None
        else:
            assert "outside sweep.tokens_per_param" in r.skip
            assert r.est_s == 0.0 and r.run_key == ""
            assert abs(r.d - r.budget / (6 * r.n)) < 1  # the D it would have had, for the table
    assert any(r.skip for r in runs) and any(not r.skip for r in runs)


HEAD = 3 * 2 * 64 * 1024  # fwd + bwd of a d_model 64, V 1024 head: the term 6N leaves out


def head_facts(overrides):
    """fake_facts with exact FLOPs per token above 6N, as for the real small models."""
    f = fake_facts(overrides)
    return replace(f, flops_per_token=6.0 * f.n_params_nonembed + HEAD)


def exact_plan(d):
    spec = SweepSpec.from_dict("t", d)
    spec.check_conflicts(())
    return spec, resolve(spec, expand(spec), head_facts, ckpt, flops_per_sec=1e9)


def test_isoflop_exact_budgets_set_exact_training_flops_in_whole_batches():
    d = {"axes": {"model.size": [1e5, 3e5]}, "budgets": [1e13, 3e13]}
    spec, runs = exact_plan({**d, "budget_flops": "exact"})
    _, six = exact_plan(d)
    assert spec.budget_flops == "exact" and all(r.budget_flops == "exact" for r in runs)
    for r, r6 in zip(runs, six):
        per_token = 6.0 * r.n + HEAD
        assert r.facts.flops_per_token == per_token
        assert r.skip is None and r.d % BATCH == 0
        assert f"train.tokens={int(r.d)}" in r.overrides
        # exact FLOPs within rounding to whole batches of the budget; 6ND below it
        assert r.c_exact == per_token * r.d
        assert abs(r.c_exact - r.budget) <= per_token * BATCH / 2
        assert r.c_budgeted == r.c_exact and r.c < r.budget
        assert r.d < r6.d and r.run_key != r6.run_key  # fewer tokens than the 6ND plan
        assert r6.budget_flops == "6nd" and r6.c_budgeted == r6.c


def test_isoflop_exact_budgets_apply_the_window_and_batch_floor_to_the_exact_d():
    d = {"axes": {"model.size": [1e5, 3e5]}, "budgets": [1e12], "budget_flops": "exact"}
    _, runs = exact_plan({**d, "tokens_per_param": [5, 30]})
    for r in runs:
        ideal = r.budget / (6.0 * r.n + HEAD)
        ok = 5 <= ideal / r.n <= 30
        assert (r.skip is None) == ok, r.skip
        if not ok:
            assert "outside sweep.tokens_per_param" in r.skip and r.run_key == ""
            assert abs(r.d - ideal) < 1  # the D it would have had, for the table
    assert any(r.skip for r in runs) and any(not r.skip for r in runs)
    _, runs = exact_plan({**d, "budgets": [1e8]})
    assert all("D = C/F_exact" in r.skip and "below one batch" in r.skip for r in runs)


def test_default_budget_convention_is_6nd_and_leaves_plans_unchanged():
    d = {"axes": {"model.size": [1e5, 3e5]}, "budgets": [1e13, 3e13], "tokens_per_param": [1, 1e4]}
    spec, default = exact_plan(d)
    explicit_spec, explicit = exact_plan({**d, "budget_flops": "6nd"})
    assert spec.budget_flops == explicit_spec.budget_flops == "6nd"
    assert explicit == default
    for r in default:  # D = C / 6N whatever the exact FLOPs per token are
        assert r.d == round(r.budget / (6 * r.n) / BATCH) * BATCH
        assert r.budget_flops == "6nd"


@pytest.mark.parametrize("value", ["6ND", "flops", "", 6, True, ["exact"]])
def test_a_bad_budget_convention_fails_with_one_line_naming_the_field(value):
    with pytest.raises(PlanError) as e:
        SweepSpec.from_dict("t", {"budgets": [1e12], "budget_flops": value})
    msg = str(e.value)
    assert msg.startswith("sweep.budget_flops: expected one of 6nd, exact")
    assert "\n" not in msg and repr(value) in msg


def test_exact_budget_convention_needs_budgets():
    with pytest.raises(PlanError, match="sweep.budget_flops only applies to IsoFLOP"):
        SweepSpec.from_dict("t", {"axes": {"train.tokens": [1e6]}, "budget_flops": "exact"})


def test_size_the_ladder_cannot_build_is_skipped_not_raised():
    _, runs = fake_plan({"axes": {"model.size": [1e5, 1e9]}})
    assert runs[0].skip is None
    assert "ladder cannot build" in runs[1].skip


def test_ablation_runs_each_variant_over_the_same_grid():
    variants = {
        "base": {},
        "post_ln": {"model.norm_position": "post"},
        "mqa": {"model.n_kv_heads": 1},
    }
    spec, runs = fake_plan(
        {"axes": {"model.size": [1e5, 2e5], "train.seed": [0, 1]}, "variants": variants}
    )
    assert spec.kind == "grid+ablation"
    assert len(runs) == 12
    by_variant = {}
    for r in runs:
        by_variant.setdefault(r.variant, []).append(r)
    assert sorted(by_variant) == ["base", "mqa", "post_ln"]
    for name, rs in by_variant.items():
        assert len(rs) == 4
        extra = {o for r in rs for o in r.overrides} - {
            o for r in by_variant["base"] for o in r.overrides
        }
        assert extra == {f"{k}={format_value(v)}" for k, v in variants[name].items()}


def test_identical_points_are_planned_once():
    _, runs = fake_plan({"axes": {"train.seed": [0, 0]}})
    assert runs[0].skip is None
    assert runs[1].skip == "same config as point #0"


def test_wsd_branches_share_one_stable_run_and_save_compute():
    spec, runs = fake_plan(
        {"axes": {"model.size": [1e5]}, "wsd": {"tokens": [1e6, 2e6, 4e6], "decay": 0.25}}
    )
    stable, *branches = runs
    assert stable.phase == "stable" and [b.phase for b in branches] == ["branch", "branch"]
    assert stable.d == 4e6 and [b.d for b in branches] == [1e6, 2e6]
    starts = [branch_start(d, 0.25, BATCH) for d in (1e6, 2e6)]
    assert starts == [749568, 1499136]  # (1 - 0.25) D rounded down to whole batches
    assert f"train.save_at_tokens=[{starts[0]},{starts[1]}]" in stable.overrides
    for b, s in zip(branches, starts):
        assert f"train.init_from=/runs/{stable.run_key}/tokens_{s}.pt" in b.overrides
        assert b.tokens_trained == b.d - s
    spent, cosine = wsd_compute(runs)
    n = stable.n
    assert cosine == 6 * n * (1e6 + 2e6 + 4e6)
    assert spent == 6 * n * (4e6 + (1e6 - starts[0]) + (2e6 - starts[1]))
    assert spent < 0.75 * cosine
    assert [len(w) for w in waves(runs)] == [1, 2]


def test_wsd_branches_of_a_skipped_stable_run_are_skipped():
    _, runs = fake_plan({"axes": {"model.size": [1e9]}, "wsd": {"tokens": [1e6, 2e6]}})
    assert all(r.skip for r in runs)
    assert "stable run #0" in runs[1].skip


def test_estimated_time_packs_runs_on_parallel_slots():
    _, runs = fake_plan({"axes": {"model.size": [1e5, 1e5 + 1, 1e5 + 2, 1e5 + 3]}})
    one = total_estimate(runs, jobs=1)
    assert one == pytest.approx(sum(r.est_s for r in runs))
    assert total_estimate(runs, jobs=2) == pytest.approx(one / 2, rel=0.01)
    assert runs[0].est_s == pytest.approx(6 * 1e5 * 1e6 / 1e9 + 2.0)


@pytest.mark.parametrize(
    "d, cli, match",
    [
        (
            {"axes": {"model.size": [1e5], "model.d_model": [64]}},
            (),
            "model.size and model.d_model",
        ),
        ({"axes": {"model.size": [1e5]}}, ("model.n_layers",), "model.size and model.n_layers"),
        (
            {"axes": {"train.tokens": [1e6]}},
            ("train.tokens",),
            "train.tokens is set on the command line",
        ),
        (
            {
                "axes": {"train.tokens": [1e6]},
                "variants": {"base": {}, "short": {"train.tokens": 5e5}},
            },
            (),
            "variant 'short' overrides train.tokens",
        ),
        (
            {"axes": {"train.tokens": [1e6]}, "budgets": [1e12]},
            (),
            "train.tokens is set by sweep.axes",
        ),
        ({"budgets": [1e12], "wsd": {"tokens": [1e6, 2e6]}}, (), "cannot be combined"),
        ({"axes": {"train.seed": [0]}, "fixed": {"train.seed": 1}}, (), "both swept"),
        ({"axes": {"train.seed": []}}, (), "sweep.axes.train.seed"),
        ({"wsd": {"tokens": [1e6], "decay": 1.5}}, (), "sweep.wsd.decay"),
        ({"budgets": [-1]}, (), "sweep.budgets"),
        ({"budgets": [1e12], "tokens_per_param": [5, 2]}, (), "sweep.tokens_per_param"),
        ({"axes": {"train.tokens": [1e6]}, "tokens_per_param": [1, 2]}, (), "only applies"),
        ({"axes": {"tracking.experiment": ["a", "b"]}}, (), "tracking.experiment: where a sweep"),
    ],
)
def test_conflicting_or_bad_axes_fail_before_anything_runs(d, cli, match):
    with pytest.raises(PlanError, match=match):
        fake_plan(d, cli)


# ---------------------------------------------------------------- shipped sweeps, real factory
CONF = Path(__file__).resolve().parents[1] / "conf"
SWEEPS = sorted(p.stem for p in (CONF / "sweep").glob("*.yaml"))


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
        n = count_params(model_config({**llama, "size": size, "vocab_size": 1024})).non_embedding
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
    _, runs = plan_of(comp, ["sweep=families"])
    by_family = {}
    for r in runs:
        assert not r.skip
        family = dict(o.split("=", 1) for o in r.overrides)["model.family"]
        by_family.setdefault(family, []).append(r)
        point = dict(o.split("=", 1) for o in r.overrides)
        vanilla = yaml.safe_load((CONF / "model" / "vanilla.yaml").read_text())
        cfg = model_config(
            {
                **vanilla,
                "family": family,
                "size": float(point["model.size"]),
                "vocab_size": 1024 + {"decoder": 0, "encoder": 1, "encoder_decoder": 7}[family],
                "max_seq_len": 128,
            }
        )  # seq2seq: 6 spans + a start
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


@pytest.mark.parametrize(
    "arg",
    ["sweep.axes.model\\.size=[1e5]", "sweep.axes.model.size=[1e5]", "++sweep.fixed.train.lr=1e-3"],
)
def test_a_dotted_sweep_key_as_a_hydra_path_is_one_line_naming_the_spelling_that_works(
    comp, capsys, arg
):
    from sweeps import run

    with pytest.raises(SystemExit) as stop:
        run.check_dotted_keys(["sweep=ablation", arg])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {arg}: ") and err.count("\n") == 1
    suggested = re.search(r"write '([^']+)'", err).group(1)
    run.check_dotted_keys(["sweep=ablation", suggested])  # passes the check
    comp(["sweep=ablation", suggested])  # and Hydra composes it


def test_an_axis_overridden_from_the_command_line_keeps_the_other_axes(comp):
    """The documented spelling (docs/sweeps.md): a dict merged into sweep.axes."""
    _, runs = plan_of(comp, ["sweep=ablation", "sweep.axes={model.size:[1e5]}"])

    def values(key):
        return {float(o.split("=")[1]) for r in runs for o in r.overrides if o.startswith(key)}

    assert values("model.size=") == {1e5}
    assert values("train.seed=") == {0, 1}  # the seed axis is still there
    assert len(runs) == 7 * 2  # 7 variants x 1 size x 1 token budget x 2 seeds


def test_the_progress_total_is_the_whole_tuned_plan_from_the_start(comp):
    """The demo's first wave is its candidates; the bar's total counts its chosen runs, other
    seeds and transfers too: the runs and seconds its dry run prints for every stage."""
    from sweeps import tuning_view

    args = ["sweep=demo"]
    runs, tuned = driver.Sweep.from_cli(comp(args), args, comp).make_plan()
    whole = driver.planned(runs, tuned)
    first = [r for r in runs if not r.skip]
    stages = tuning_view.stage_estimates(tuned)
    assert len(stages) > 1 and len(first) == len(stages[0])
    assert whole.runs == sum(tuned.cost(a)[3] for a in tuned.arms) > len(first)
    assert whole.est_s == pytest.approx(sum(max(s, 1.0) for st in stages for s in st))
    # an untuned sweep's plan is its runs
    args = ["sweep=ablation"]
    runs, tuned = driver.Sweep.from_cli(comp(args), args, comp).make_plan()
    assert tuned is None and driver.planned(runs, None).runs == len(runs)
