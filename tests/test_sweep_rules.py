"""`sweep.lr_rule` and `sweep.batch_rule` through the driver's plan and dry run: each point's
train.lr and train.batch_tokens from its N, D and C, written in the sweep file or read from a
hand-written fit.json (the contract `analysis` writes: `{key, variable, scale, exponent, ci95}`
or `{key, scale, exponents: {N: a, D: b}}`). Expected values are computed here from the
formulas, not by the module under test."""

import json
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from sweeps import driver, plan

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"

GRID = """
axes:
  model: [llama]
  model.size: [1.5e4, 3.4e4]
  train.tokens: [1e5, 4e5]
fixed:
  data.vocab_size: 1024
  train.seq_len: 128
"""
ISOFLOP = """
axes:
  model: [llama]
  model.size: [1.5e4, 3.4e4]
budgets: [1e11, 3e11]
fixed:
  data.vocab_size: 1024
  train.seq_len: 128
"""


@pytest.fixture
def comp(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlruns.db'}")
    monkeypatch.setenv("SCALING_LAB_RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.setenv("SCALING_LAB_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "sweep").mkdir()
    (tmp_path / "sweep" / "rgrid.yaml").write_text(GRID)
    (tmp_path / "sweep" / "riso.yaml").write_text(ISOFLOP)
    (tmp_path / "sweep" / "rwsd.yaml").write_text(
        GRID.replace("  train.tokens: [1e5, 4e5]\n", "wsd: {tokens: [1e5, 4e5]}\n")
    )
    search = f"hydra.searchpath=[file://{tmp_path}]"
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        yield lambda o: compose("run", overrides=[search, *o], return_hydra_config=True)


def runs_of(comp, args):
    runs, _ = driver.Sweep.from_cli(comp(args), args, comp).make_plan()
    return runs


def value(run, key):
    found = [o.split("=", 1)[1] for o in run.overrides if o.startswith(f"{key}=")]
    assert len(found) == 1, run.overrides
    return float(found[0])


def nearest_sequences(raw, seq_len=128):
    return max(1, round(raw / seq_len)) * seq_len


def test_rules_from_a_fitted_json_set_each_points_lr_and_batch(comp, tmp_path, capsys):
    fit = tmp_path / "fit.json"
    lr = {"key": "train.lr", "scale": 0.9, "exponents": {"N": -0.3, "D": -0.05}}
    batch = {"key": "train.batch_tokens", "variable": "D", "scale": 0.05, "exponent": 0.8}
    batch["ci95"] = {"exponent": [0.6, 1.0]}
    fit.write_text(json.dumps({"lr_rule": lr, "batch_rule": batch}))
    args = ["sweep=rgrid", f"+sweep.lr_rule={{fitted:{fit}}}"]
    args += [f"+sweep.batch_rule={{fitted:{fit}}}"]
    runs = runs_of(comp, args)
    assert len(runs) == 4 and len({r.n for r in runs}) == 2
    for r in runs:
        n, d = r.n, r.facts.tokens
        assert value(r, "train.lr") == float(f"{0.9 * n**-0.3 * d**-0.05:.3g}")
        assert r.facts.batch_tokens == nearest_sequences(0.05 * d**0.8)
    assert {r.facts.batch_tokens for r in runs} == {512, 1536}  # 0.05 D^0.8: 502, 1507
    dry = [*args, "sweep.dry_run=true"]
    assert driver.drive(comp(dry), dry, comp, launch=None) == []
    out = capsys.readouterr().out
    assert f"lr_rule: train.lr = 0.9 * N^-0.3 * D^-0.05 (fitted: {fit})" in out
    assert f"batch_rule: train.batch_tokens = 0.05 * D^0.8 (fitted: {fit})" in out
    assert "nearest multiple of train.seq_len" in out and "95% intervals: exponent [0.6, 1]" in out
    assert f"D 1e+05, C {6 * runs[0].n * 1e5:.3g} (6ND): train.batch_tokens=512" in out
    assert not (tmp_path / "mlruns.db").exists()


def test_deepseeks_constants_in_c_set_an_isoflop_ladders_lr_and_batch(comp):
    # DeepSeek LLM section 3.1: eta_opt = 0.3118 C^-0.125, B_opt = 0.2920 C^0.3271 (tokens)
    args = ["sweep=riso", "+sweep.lr_rule={scale:0.3118,exponent:-0.125,variable:C}"]
    args += ["+sweep.batch_rule={scale:0.2920,exponent:0.3271,variable:C}"]
    runs = runs_of(comp, args)
    assert len(runs) == 4
    for r in runs:
        c = r.budget
        assert value(r, "train.lr") == float(f"{0.3118 * c**-0.125:.3g}")
        batch = nearest_sequences(0.2920 * c**0.3271)
        assert r.facts.batch_tokens == batch
        assert r.d % batch == 0 and abs(r.d - c / r.facts.six_n) <= batch / 2  # whole batches
    # C = 1e11: 0.2920 * 1e11^0.3271 = 1157 tokens -> 9 sequences of 128
    assert {r.facts.batch_tokens for r in runs if r.budget == 1e11} == {1152}


def test_batch_stays_within_one_sequence_and_d(comp):
    huge = runs_of(comp, ["sweep=rgrid", "+sweep.batch_rule={scale:1e9,exponent:0,variable:N}"])
    assert [r.facts.batch_tokens for r in huge] == [int(r.facts.tokens // 128) * 128 for r in huge]
    tiny = runs_of(comp, ["sweep=rgrid", "+sweep.batch_rule={scale:1,exponent:0,variable:N}"])
    assert {r.facts.batch_tokens for r in tiny} == {128}


def test_a_not_identified_fitted_rule_is_used_with_a_warning(comp, tmp_path, capsys):
    fit = tmp_path / "fit.json"
    rule = {"key": "train.lr", "variable": "N", "scale": 0.5, "exponent": -0.5}
    rule["not_identified"] = ["fewer than 3 distinct N"]
    fit.write_text(json.dumps({"lr_rule": rule}))
    args = ["sweep=rgrid", f"+sweep.lr_rule={{fitted:{fit}}}", "sweep.dry_run=true"]
    driver.drive(comp(args), args, comp, launch=None)
    out = capsys.readouterr().out
    assert "lr_rule is not identified (fewer than 3 distinct N): its point estimate is used" in out


def test_rules_in_n_only_keep_the_single_variable_lr_rule(comp):
    runs = runs_of(comp, ["sweep=rgrid", "+sweep.lr_rule={scale:0.5,exponent:-0.5}"])
    assert all(value(r, "train.lr") == float(f"{0.5 * r.n**-0.5:.3g}") for r in runs)
    assert len({value(r, "train.lr") for r in runs}) == 2  # one per size


FIT = {"lr_rule": {"key": "train.lr", "variable": "N", "scale": 0.5, "exponent": -0.5}}


@pytest.mark.parametrize(
    "args, fit, message",
    [
        (["+sweep.batch_rule={scale:0.3,exponent:0.5}"], None, r"^sweep\.batch_rule\.variable: "),
        (["+sweep.batch_rule={scale:0.3,exponent:0.5,variable:X}"], None, r"variable: 'X' is not"),
        (["+sweep.lr_rule={scale:-1,exponent:0.5}"], None, r"^sweep\.lr_rule\.scale: must be > 0"),
        (["+sweep.lr_rule={scale:1,exponents:{N:a}}"], None, r"^sweep\.lr_rule\.exponent: "),
        (["+sweep.lr_rule={scale:1,exponent:1,exponents:{N:1}}"], None, r"one of exponent"),
        (["+sweep.lr_rule={scale:1,power:1}"], None, r"^sweep\.lr_rule\.power: unknown field"),
        (["+sweep.batch_rule={fitted:FIT}"], FIT, r"^sweep\.batch_rule\.fitted: .* no batch_rule"),
        (
            ["+sweep.lr_rule={fitted:FIT}"],
            {"lr_rule": {**FIT["lr_rule"], "key": "optimizer.lr"}},
            r"sets optimizer\.lr, not train\.lr",
        ),
        (
            ["+sweep.batch_rule={scale:1,exponent:0.5,variable:D}", "train.batch_tokens=1024"],
            None,
            r"^train\.batch_tokens is set by the command line but sweep\.batch_rule",
        ),
        (
            [
                "+sweep.batch_rule={scale:1,exponent:0.5,variable:D}",
                "+sweep.tune={train.batch_tokens:[512,1024]}",
            ],
            None,
            r"^train\.batch_tokens is set by sweep\.tune but sweep\.batch_rule",
        ),
    ],
)
def test_bad_rules_are_one_error_naming_the_field(comp, tmp_path, args, fit, message):
    path = tmp_path / "fit.json"
    if fit is not None:
        path.write_text(json.dumps(fit))
    args = ["sweep=rgrid", *(a.replace("FIT", str(path)) for a in args)]
    with pytest.raises(plan.PlanError, match=message) as e:
        runs_of(comp, args)
    assert "\n" not in str(e.value)
    assert not (tmp_path / "mlruns.db").exists()


def test_a_rule_in_d_cannot_set_wsd_branches(comp):
    with pytest.raises(plan.PlanError, match=r"^sweep\.lr_rule: a rule in D or C gives each WSD"):
        runs_of(comp, ["sweep=rwsd", "+sweep.lr_rule={scale:1,exponent:-0.1,variable:D}"])
    runs = runs_of(comp, ["sweep=rwsd", "+sweep.lr_rule={scale:0.5,exponent:-0.5,variable:N}"])
    assert {r.phase for r in runs} == {"stable", "branch"}


def test_the_dry_run_fits_80_columns_shows_seeds_and_no_empty_rule_lines(
    comp, tmp_path, monkeypatch, capsys
):
    from sweeps import rules, sweep_view

    seeded = GRID.replace(
        "  train.tokens: [1e5, 4e5]\n", "  train.tokens: [1e5, 1e6]\n  train.seed: [0, 1]\n"
    )
    seeded += "variants:\n  base: {}\n  sinusoidal: {model.pos_encoding: sinusoidal}\n"
    (tmp_path / "sweep" / "rseed.yaml").write_text(seeded)
    args = ["sweep=rseed"]
    sweep = driver.Sweep.from_cli(comp(args), args, comp)
    runs, _ = sweep.make_plan()
    assert len(runs) == 16
    assert rules.describe(sweep.spec, runs) == []  # no rule set: nothing per point

    monkeypatch.setenv("COLUMNS", "80")  # what a terminal of 80 columns exports
    sweep_view.print_plan(sweep.spec, runs, 1, False, 0.1, sweep.names.block)
    lines = capsys.readouterr().out.splitlines()
    assert all(len(line.rstrip()) <= 80 for line in lines)
    header = next(i for i, line in enumerate(lines) if line.split()[:2] == ["#", "seed"])
    rows = [line.split() for line in lines[header + 2 : header + 2 + len(runs)]]
    assert [int(r[0]) for r in rows] == [r.index for r in runs]  # every row number whole
    assert not any("…" in cell for row in rows for cell in row)  # no number cut
    assert [r[1] for r in rows] == [sweep_view.seed_of(r) for r in runs]
    assert {r[1] for r in rows} == {"0", "1"}
    assert len({tuple(r) for r in rows}) == len(rows)  # no two rows read the same
