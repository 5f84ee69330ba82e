"""Plan expansion as pure functions: grids, IsoFLOP arithmetic, ablations, WSD branches, conflicts.

A small fake resolver stands in for Hydra + the model factory here (N = model.size, or
12 L d^2 for explicit shapes), so each rule is checked in isolation; test_sweep_plan.py checks
the same rules through the real conf/ tree and the factory.
"""

import hashlib
from dataclasses import replace

import pytest

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


def plan(d, cli=()):
    spec = SweepSpec.from_dict("t", d)
    spec.check_conflicts(cli)
    return spec, resolve(spec, expand(spec), fake_facts, ckpt, flops_per_sec=1e9, overhead_s=2.0)


def test_grid_crosses_every_axis_in_order():
    spec, runs = plan(
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
    _, runs = plan({"axes": {"model.size": [1e5, 3e5]}, "budgets": [1e13, 3e13]})
    assert [r.budget for r in runs] == [1e13, 3e13, 1e13, 3e13]
    for r in runs:
        exact = r.budget / (6 * r.n)
        assert r.d % BATCH == 0
        assert abs(r.d - exact) <= BATCH / 2
        assert f"train.tokens={int(r.d)}" in r.overrides


def test_isoflop_point_below_one_batch_is_skipped_with_reason():
    _, runs = plan({"axes": {"model.size": [1e5, 1e8]}, "budgets": [1e11]})
    small, big = runs
    assert small.skip is None
    assert "below one batch" in big.skip
    assert big.est_s == 0.0


def test_isoflop_tokens_per_param_window_skips_the_far_wings():
    spec = {"axes": {"model.size": [1e5, 3e5]}, "budgets": [1e12], "tokens_per_param": [10, 30]}
    _, runs = plan(spec)
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
    _, runs = plan({"axes": {"model.size": [1e5, 1e9]}})
    assert runs[0].skip is None
    assert "ladder cannot build" in runs[1].skip


def test_ablation_runs_each_variant_over_the_same_grid():
    variants = {
        "base": {},
        "post_ln": {"model.norm_position": "post"},
        "mqa": {"model.n_kv_heads": 1},
    }
    spec, runs = plan(
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
    _, runs = plan({"axes": {"train.seed": [0, 0]}})
    assert runs[0].skip is None
    assert runs[1].skip == "same config as point #0"


def test_wsd_branches_share_one_stable_run_and_save_compute():
    spec, runs = plan(
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
    _, runs = plan({"axes": {"model.size": [1e9]}, "wsd": {"tokens": [1e6, 2e6]}})
    assert all(r.skip for r in runs)
    assert "stable run #0" in runs[1].skip


def test_estimated_time_packs_runs_on_parallel_slots():
    _, runs = plan({"axes": {"model.size": [1e5, 1e5 + 1, 1e5 + 2, 1e5 + 3]}})
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
        plan(d, cli)
