"""Tuning inside a sweep (`sweep.tune`, `tune_at`, `tune_halving`) and `sweep.lr_rule`.

Plan-level tests use the real conf/ tree through Hydra's compose API (nothing trained); the
end-to-end test trains a tiny tuned sweep with `python -m sweeps.run` twice, by successive
halving and as the full grid, and checks both choose the same learning rate.
"""

import json
import math
import subprocess
import sys
from pathlib import Path

import mlflow
import pytest
from sweep_helpers import TINY, _corpus, _env, _tag, sweep_file, tuned_plan

from sweeps import driver, plan, rules, tuning, tuning_view

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"


def test_halving_an_8_point_grid_costs_about_two_runs_per_arm(comp):
    spec, runs, tp = tuned_plan(comp, TINY)
    assert len(tp.arms) == 12 and all(a.tuned for a in tp.arms)
    for arm in tp.arms:
        spent, grid, untuned, n_runs = tp.cost(arm)
        assert grid == pytest.approx(8 * untuned)
        # 8 S/8 + 4 S/8 + 2 S/4 + (D - S/2) with S = 0.8 D: 2.2 D, up to whole batches
        assert spent / untuned == pytest.approx(2.2, abs=0.08)
        assert n_runs == 8 + 4 + 2 + 1
        s = arm.stable
        assert arm.rungs == tuple(int(f * s) // 8192 * 8192 for f in (0.125, 0.25, 0.5))
    first = tp.first_stage()
    assert len(first) == 12 * 8 and {r.phase for r in first} == {"candidate"}
    # every candidate's first segment is its own run, tagged with its arm
    assert len({r.run_key for r in first}) == 96
    tags = [o for o in first[0].overrides if o.startswith("++tracking.tags.")]
    assert any("tune_role='candidate'" in t for t in tags)
    assert any(f"arm='{tp.arms[0].id}'" in t for t in tags)


def test_smallest_budget_tunes_one_arm_per_size_and_transfers(comp):
    _, _, tp = tuned_plan(comp, [*TINY, "+sweep.tune_at=smallest_budget"])
    tuned = [a for a in tp.arms if a.tuned]
    transfers = [a for a in tp.arms if not a.tuned]
    assert len(tuned) == 3 and len(transfers) == 9
    assert {a.tokens for a in tuned} == {500000}
    for a in transfers:
        src = tp.arms[a.tuned_at]
        assert src.run.n == a.run.n and src.tokens < a.tokens


def test_dry_run_shows_the_tuning_and_its_cost(comp, capsys, tmp_path):
    args = [*TINY, "+sweep.tune_at=smallest_budget", "sweep.dry_run=true"]
    assert driver.drive(comp(args), args, comp, launch=None) == []
    out = capsys.readouterr().out
    assert "tuning (successive halving, tune_at smallest_budget): 8 candidates" in out
    assert "transfer from" in out
    assert "against: the untuned sweep" in out and "the full grid at every arm" in out
    assert not (tmp_path / "mlruns.db").exists()


def test_rungs_too_soon_after_warmup_are_warned_about_before_anything_trains(comp, capsys):
    # grid.yaml's arms train 61-488 steps: halving's default first rung (1/8 of the stable
    # phase) comes 5-38 steps after their warmup, where a higher lr looks better early on
    _, _, tp = tuned_plan(comp, TINY)
    warning = tuning_view.early_rungs(tp)
    assert warning.startswith("warning: 12 of 12 tuned arms rank their candidates fewer than 100")
    after = [a.rungs[0] // 8192 - a.warmup_steps for a in tp.arms]
    assert max(after) < tuning_view.EARLY_RUNG_STEPS
    assert f"{min(after)} steps" in warning
    # one rung at half the stable phase: only the shorter budgets are still too early
    _, _, later = tuned_plan(comp, [*TINY, "+sweep.tune_halving={rungs:[0.5]}"])
    late_after = [a.rungs[0] // 8192 - a.warmup_steps for a in later.arms]
    n_early = sum(x < tuning_view.EARLY_RUNG_STEPS for x in late_after)
    assert 0 < n_early < 12
    assert tuning_view.early_rungs(later).startswith(f"warning: {n_early} of 12 tuned arms")
    args = [*TINY, "sweep.dry_run=true"]
    driver.drive(comp(args), args, comp, launch=None)
    assert "short-horizon bias" in capsys.readouterr().out
    full = tuned_plan(comp, [*TINY, "+sweep.tune_halving=false"])[2]
    assert tuning_view.early_rungs(full) is None  # the full grid compares at the budget


def _seed(run) -> int:
    """The seed a run trains with, read from its overrides (the config's 0 when none)."""
    found = [o.split("=", 1)[1] for o in run.overrides if o.startswith("train.seed=")]
    assert run.seed == int(found[0] if found else 0)
    return run.seed


def test_seeds_repeat_every_point_of_an_untuned_sweep(comp, capsys):
    _, one, _ = tuned_plan(comp, ["sweep=tiny"])
    spec, runs, _ = tuned_plan(comp, ["sweep=tiny", "+sweep.seeds=2"])
    assert spec.seeds == 2 and len(runs) == 2 * len(one) == 8
    assert [_seed(r) for r in runs] == [0, 1] * 4
    # seed 0 is the run the sweep has without `seeds` (resumed, not retrained); seed 1 its own
    assert [r.run_key for r in runs if r.seed == 0] == [r.run_key for r in one]
    assert len({r.run_key for r in runs}) == 8
    for r0, r1 in zip(runs[::2], runs[1::2]):
        assert (r0.n, r0.d) == (r1.n, r1.d)
    args = ["sweep=tiny", "+sweep.seeds=2", "sweep.dry_run=true"]
    driver.drive(comp(args), args, comp, launch=None)
    header = next(line for line in capsys.readouterr().out.splitlines() if "run key" in line)
    assert header.split()[:5] == ["#", "run", "key", "variant", "phase"]
    assert header.split()[5] == "seed"  # a column of the plan
    # WSD: each seed has its own stable run, and its branches start from that one
    _, wsd, _ = tuned_plan(comp, ["sweep=wsd", "+sweep.seeds=2"])
    for r in wsd:
        if r.phase == "branch":
            assert wsd[r.stable_index].seed == r.seed and wsd[r.stable_index].phase == "stable"
    assert {r.seed for r in wsd} == {0, 1}


# one llama size at two token budgets: the smaller tuned, the larger a transfer
SEEDED = [
    "sweep=tiny",
    "~sweep.axes",
    "+sweep.axes={model.size:[2e4],train.tokens:[16384,32768]}",
    "+sweep.tune={train.lr:[1e-3,4e-3]}",
    "+sweep.tune_at=smallest_budget",
    "+sweep.seeds=2",
]


def _train_stages(tp, losses: dict[str, float]) -> list[list]:
    """Every stage the plan derives when each run finishes with `losses[lr value]`."""
    stages, known = [tp.first_stage()], {}
    chosen_tags = []
    while stages[-1]:
        known.update({r.run_key: r for r in stages[-1]})

        def losses_of(keys):
            return {k: ("FINISHED", losses[_tag(known[k], "tune_values")], "") for k in keys}

        def tag_chosen(members, c):
            chosen_tags.append([r.seed for r, m in members if m == c])

        stages.append(tp.next_stage({}, losses_of, tag_chosen))
    return stages[:-1], chosen_tags


@pytest.mark.parametrize("halving", ["{rungs:[0.5]}", "false"])
def test_seeds_train_the_chosen_runs_and_transfers_candidates_stay_at_seed_0(comp, halving):
    _, _, tp = tuned_plan(comp, [*SEEDED, f"+sweep.tune_halving={halving}"])
    assert [a.tuned for a in tp.arms] == [True, False]
    stages, chosen_tags = _train_stages(tp, {"train.lr=0.001": 3.0, "train.lr=0.004": 2.5})
    runs = [r for stage in stages for r in stage]
    candidates = [r for r in runs if r.phase == "candidate"]
    finals = [r for r in runs if r.phase in ("chosen", "transfer")]
    assert {_seed(r) for r in candidates} == {0}  # x1
    # the tuned arm's result and the transfer, each at seeds 0 and 1 (x2), at the chosen lr;
    # the full grid's seed 0 is its best candidate, tagged chosen once ranked
    expected = [("chosen", 1), ("transfer", 0), ("transfer", 1)]
    if halving == "false":
        assert len(candidates) == 2 and chosen_tags == [[0]]
    else:  # 2 segments to the rung, the winner's decay to the budget
        assert len(candidates) == 2 and chosen_tags == []
        expected.insert(0, ("chosen", 0))
    assert sorted((r.phase, _seed(r)) for r in finals) == expected
    for r in finals:
        assert _tag(r, "tune_role") == r.phase and _tag(r, "tune_values") == "train.lr=0.004"
        assert (
            "train.lr=0.004" in r.overrides and _tag(r, "arm") == tp.arms[r.phase == "transfer"].id
        )
    assert len({r.run_key for r in runs}) == len(runs)
    seed1 = next(r for r in finals if r.phase == "chosen" and r.seed == 1)
    assert not any(o.startswith("train.init_from=") for o in seed1.overrides)  # from step 0
    assert seed1.tokens_trained == seed1.d == tp.arms[0].tokens
    assert tp.arms[0].chosen == 1  # the other seed did not move the choice
    spent, _, _, n_runs = tp.cost(tp.arms[0])
    assert n_runs == (4 if halving != "false" else 3)
    assert tp.cost(tp.arms[1])[3] == 2


def test_a_tuned_dry_run_names_the_seeds(comp, capsys):
    args = [*SEEDED, "+sweep.tune_halving={rungs:[0.5]}", "sweep.dry_run=true"]
    assert driver.drive(comp(args), args, comp, launch=None) == []
    out = " ".join(capsys.readouterr().out.split())
    assert "each arm's result at seeds 0..1 (seed 0 the tuned run" in out
    assert "then 1 more seed(s) of its result" in out


@pytest.mark.parametrize(
    "extra, message",
    [
        ("+sweep.seeds=0", r"^sweep\.seeds: expected a whole number of seeds >= 1 .* got 0$"),
        ("+sweep.seeds=abc", r"^sweep\.seeds: expected .* got 'abc'$"),
        ("+sweep.seeds=1.5", r"^sweep\.seeds: expected .* got 1\.5$"),
        ("+sweep.seeds=true", r"^sweep\.seeds: expected .* got True$"),
        ("train.seed=3", r"^train\.seed is set by the command line but sweep\.seeds=2"),
        ("+sweep.tune={train.seed:[0,1]}", r"^train\.seed is set by sweep\.tune but sweep\.seeds"),
    ],
)
def test_bad_seeds_fail_naming_the_key(comp, extra, message):
    seeds = [] if extra.startswith("+sweep.seeds") else ["+sweep.seeds=2"]
    with pytest.raises(plan.PlanError, match=message):
        tuned_plan(comp, ["sweep=tiny", *seeds, extra])


@pytest.mark.parametrize(
    "extra, message",
    [
        ("+sweep.tune={train.lrr:[1e-3]}", "sweep.tune.train.lrr: not a config field"),
        ("+sweep.tune={train.lr:[]}", "sweep.tune.train.lr: expected a non-empty list"),
        ("+sweep.tune={}", "sweep.tune: expected a mapping"),
        ("+sweep.tune={train.lr:[1e-3,1e-3]}", "sweep.tune.train.lr: a value is listed twice"),
        ("+sweep.tune={train.tokens:[1e3]}", "sweep.tune.train.tokens: not tunable"),
        ("+sweep.tune={train.batch_tokens:[1024]}", "sweep.tune.train.batch_tokens: sweep.fixed"),
        ("+sweep.tune_at=largest", "sweep.tune_at: only applies with sweep.tune"),
        ("+sweep.tune_halving={rungs:[0.5,0.25]}", "sweep.tune_halving: only applies"),
        # 8-step arms: 2% and 3% warmup are both 0 steps, one run
        (
            "+sweep.tune={train.warmup:[0.02,0.03]}",
            "sweep.tune.train.warmup: candidates train.warmup=0.02 and train.warmup=0.03 are the same run",
        ),
    ],
)
def test_bad_tuning_input_fails_naming_the_key(comp, extra, message):
    with pytest.raises(plan.PlanError, match="^" + message.replace("[", r"\[").replace(".", r"\.")):
        _, _, tp = tuned_plan(comp, ["sweep=tiny", extra])
        tp.first_stage()


def test_unknown_tune_at_rule_and_bad_rungs_fail_naming_the_key(comp):
    with pytest.raises(plan.PlanError, match=r"^sweep\.tune_at: unknown rule 'largest'"):
        tuned_plan(comp, [*TINY, "+sweep.tune_at=largest"])
    with pytest.raises(plan.PlanError, match=r"^sweep\.tune_halving\.rungs: expected increasing"):
        tuned_plan(comp, [*TINY, "+sweep.tune_halving={rungs:[0.5,0.25]}"])
    # a first rung (2 batches at the 16K budget) that ends inside a 10-step warmup
    with pytest.raises(plan.PlanError, match=r"^sweep\.tune_halving\.rungs: the first rung"):
        tuned_plan(comp, [*TINY, "train.warmup=10"])


def test_a_grid_that_makes_two_arms_one_run_fails_naming_the_key():
    """Two arms differ only in train.beta2; a tuned key that the (toy) factory lets override it
    makes their candidates the same run key: the plan refuses before anything trains."""
    spec = plan.SweepSpec.from_dict(
        "t", {"axes": {"train.beta2": [0.95, 0.99]}, "tune": {"train.beta1": [0.8, 0.9]}}
    )

    def facts_of(overrides):
        # the tuned beta1 hides beta2 here: the kind of interaction the check exists for
        key = [o for o in overrides if o.startswith("train.beta1=")] or sorted(overrides)
        return plan.RunFacts(str(hash(tuple(key))), "a", 1, 8, 100, 80, 1e3, 8192.0, 1024)

    resolve = lambda pts: plan.resolve(spec, pts, facts_of, lambda k, t: f"{k}/{t}", 1e9)  # noqa: E731
    from omegaconf import OmegaConf

    config = OmegaConf.create({"train": {"beta1": 0.9, "beta2": 0.95, "warmup": 0}})
    tp = tuning.plan_tuning(
        spec.tune,
        resolve(plan.expand(spec)),
        lambda o: config,
        lambda k, t: f"{k}/{t}",
        resolve,
        1e9,
        0.0,
    )
    with pytest.raises(
        plan.PlanError, match=r"^sweep\.tune\.train\.beta1: candidate train\.beta1=0\.8"
    ):
        tp.first_stage()


def test_lr_rule_sets_lr_from_the_factorys_n(comp, tmp_path, capsys):
    rule = "+sweep.lr_rule={scale:0.5,exponent:-0.5}"
    spec, runs, _ = tuned_plan(comp, ["sweep=grid", rule])
    assert len({r.n for r in runs}) == 3
    for r in runs:
        lr = [o for o in r.overrides if o.startswith("train.lr=")]
        assert lr == [f"train.lr={float(f'{0.5 * r.n**-0.5:.3g}')}"]
    fit = tmp_path / "fit.json"
    fit.write_text(
        json.dumps({"lr_rule": {"scale": 0.5, "exponent": -0.5, "variable": "N", "ci95": {}}})
    )
    _, fitted, _ = tuned_plan(comp, ["sweep=grid", f"+sweep.lr_rule={{fitted:{fit}}}"])
    assert [r.run_key for r in fitted] == [r.run_key for r in runs]
    assert rules.rule_from_sweep("lr_rule", "constant") is None
    args = ["sweep=grid", f"+sweep.lr_rule={{fitted:{fit}}}", "sweep.dry_run=true"]
    assert driver.drive(comp(args), args, comp, launch=None) == []
    shown = capsys.readouterr().out
    assert f"lr_rule: train.lr = 0.5 * N^-0.5 (fitted: {fit})" in shown
    assert f"{0.5 * runs[0].n ** -0.5:.3g}" in shown
    with pytest.raises(plan.PlanError, match=r"^sweep\.lr_rule\.fitted: .* has no lr_rule"):
        fit.write_text("{}")
        tuned_plan(comp, ["sweep=grid", f"+sweep.lr_rule={{fitted:{fit}}}"])
    with pytest.raises(
        plan.PlanError, match=r"^train\.lr is set by sweep\.tune but sweep\.lr_rule"
    ):
        tuned_plan(comp, [*TINY, rule])  # TINY tunes train.lr


@pytest.mark.slow
def test_a_bad_tune_key_fails_the_command_in_one_line_before_anything_starts(tmp_path):
    (tmp_path / "sweep").mkdir()
    (tmp_path / "sweep" / "bad.yaml").write_text(
        sweep_file("false").replace("train.lr: [", "train.lrr: [")
    )
    env = _env(tmp_path)
    cmd = [
        sys.executable,
        "-m",
        "sweeps.run",
        "--config-dir",
        str(tmp_path),
        "sweep=bad",
        f"data.path={_corpus(tmp_path)}",
    ]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode != 0
    assert (
        out.stderr.strip().splitlines()[-1].startswith("error: sweep.tune.train.lrr: not a config")
    )
    assert "Traceback" not in out.stderr
    assert not (tmp_path / "mlruns.db").exists() and not (tmp_path / "runs").exists()


@pytest.mark.slow
def test_halving_chooses_what_the_full_grid_chooses(tmp_path):
    corpus = _corpus(tmp_path)
    (tmp_path / "sweep").mkdir()
    (tmp_path / "sweep" / "halving.yaml").write_text(sweep_file("{rungs: [0.25, 0.5]}"))
    (tmp_path / "sweep" / "fullgrid.yaml").write_text(sweep_file("false"))
    env = _env(tmp_path)

    def sweep(name):
        cmd = [
            sys.executable,
            "-m",
            "sweeps.run",
            "--config-dir",
            str(tmp_path),
            f"sweep={name}",
            f"data.path={corpus}",
            "sweep.jobs=2",
        ]
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
        return out.stdout

    sweep("halving")
    sweep("fullgrid")
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'mlruns.db'}")
    df = mlflow.search_runs(experiment_names=["scaling-lab"]).dropna(subset=["tags.run_key"])
    halving, grid = df[df["tags.sweep"] == "halving"], df[df["tags.sweep"] == "fullgrid"]
    assert set(halving["tags.arm"]) == set(grid["tags.arm"])  # one arm, one id in both
    grid_loss = {
        r["tags.tune_values"]: r["metrics.final_val_loss"]
        for _, r in grid.iterrows()
        if r["status"] == "FINISHED"
    }
    best = min(grid_loss, key=grid_loss.get)
    losses = sorted(grid_loss.values())
    assert losses[1] - losses[0] > 0.05, grid_loss  # the grid separates the candidates
    chosen_grid = grid[grid["tags.tune_role"] == "chosen"]
    assert list(chosen_grid["tags.tune_values"]) == [best]
    chosen = halving[halving["tags.tune_role"] == "chosen"]
    assert list(chosen["tags.tune_values"]) == [best]
    # the winner's segments and decay are the trajectory of its full WSD run
    assert chosen["metrics.final_val_loss"].iloc[0] == pytest.approx(grid_loss[best], abs=1e-3)
    assert chosen["params.tokens"].iloc[0] == "16384"
    # halving trained 4 segments to S/4, 2 on to S/2 and one decay: 7 runs, 2.05 runs' tokens
    rungs = sorted(halving[halving["tags.tune_role"] == "candidate"]["tags.tune_rung"].astype(int))
    assert rungs == [3072] * 4 + [6144] * 2 and len(halving) == 4 + 2 + 1
    # a rerun re-derives the choice from MLflow and trains nothing
    out = sweep("halving")
    assert "│ finished" not in out and "│ failed" not in out
    df2 = mlflow.search_runs(experiment_names=["scaling-lab"]).dropna(subset=["tags.run_key"])
    assert len(df2) == len(df)
    assert math.isfinite(chosen["metrics.final_val_loss"].iloc[0])


@pytest.mark.slow
def test_a_seeded_tuned_sweep_records_both_seeds_of_its_result(tmp_path):
    """Halving over 2 lrs at one arm with `seeds: 2`: 2 candidate segments (seed 0), the
    winner's decay (seed 0) and a full run of the winner at seed 1, both tagged chosen; the
    loader carries their seeds and the corpus's unigram entropy, the tuning analysis sees one
    chosen value with two seeds, and a rerun trains nothing."""
    from analysis.data.load import load_mlflow
    from analysis.tuning import arms as analysis_tuning

    corpus = _corpus(tmp_path)
    (tmp_path / "sweep").mkdir()
    text = sweep_file("{rungs: [0.5]}").replace("[2.5e-4, 1e-3, 6.4e-2, 1.0]", "[2.5e-4, 4e-3]")
    (tmp_path / "sweep" / "seeded.yaml").write_text(text + "seeds: 2\n")
    env = _env(tmp_path)
    cmd = [sys.executable, "-m", "sweeps.run", "--config-dir", str(tmp_path), "sweep=seeded"]
    cmd += [f"data.path={corpus}", "sweep.jobs=2"]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    uri = f"sqlite:///{tmp_path / 'mlruns.db'}"
    mlflow.set_tracking_uri(uri)
    df = mlflow.search_runs(experiment_names=["scaling-lab"]).dropna(subset=["tags.run_key"])
    assert len(df) == 4 and (df["status"] == "FINISHED").all()
    roles = sorted(zip(df["tags.tune_role"], df["params.train.seed"]))
    assert roles == [("candidate", "0"), ("candidate", "0"), ("chosen", "0"), ("chosen", "1")]
    chosen = df[df["tags.tune_role"] == "chosen"]
    assert chosen["tags.tune_values"].nunique() == 1 and chosen["tags.arm"].nunique() == 1
    assert (chosen["params.tokens"] == "16384").all()
    parent = df["tags.mlflow.parentRunId"].iloc[0]
    # the parent counts every point of every stage (the first stage alone had 2)
    assert mlflow.get_run(parent).data.tags["n_points"] == "4"
    runs = load_mlflow("scaling-lab", sweep=parent, tracking_uri=uri).frame
    assert sorted(runs["seed"]) == [0, 0, 0, 1] and runs["unigram_entropy"].notna().all()
    _, section = analysis_tuning.select(runs, ["train.lr"])
    (arm,) = section["arms"]
    assert len(arm["losses"]) == 1 and len(arm["selected"]) == 2
    again = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0 and "│ finished" not in again.stdout
    after = mlflow.search_runs(experiment_names=["scaling-lab"]).dropna(subset=["tags.run_key"])
    assert len(after) == len(df)
