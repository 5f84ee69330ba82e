"""The dry run's "what this plan can decide" block (`sweeps.decide`): the report's rules applied
to the planned cells, through `python -m sweeps.run ... sweep.dry_run=true` at 80 columns; and
the thresholds sweeps restates (it may not import analysis) checked against analysis's own."""

import inspect
import subprocess
import sys

import numpy as np
from sweep_helpers import _corpus, _env, sweep_cmd, tiny_sweep

from sweeps import decide

# 2 sizes at one token budget, one seed, one variant against base: matched cells, but no
# frontier law, no L(N, D) and no measured seed noise (conf/sweep/ablation.yaml's shape, smaller)
ONE_BUDGET = tiny_sweep(
    "  model.size: [1e4, 3e4]\n  train.tokens: [16384]",
    "variants:\n  base: {}\n  mqa: {model.n_kv_heads: 1}\n",
)
MOE = tiny_sweep(
    "  model.size: [3e4]\n  train.tokens: [16384]",
    "variants:\n  dense: {}\n"
    "  moe: {model.mlp: moe, model.n_experts: 8, model.top_k: 2, model.n_shared_experts: 1}\n",
)


def dry_run(tmp_path, name: str, text: str | None) -> list[str]:
    """`python -m sweeps.run sweep=NAME sweep.dry_run=true` off a terminal at COLUMNS=80: its
    lines. `text`: a sweep file of that name in a tmp --config-dir (None: conf/sweep/NAME)."""
    env = {**_env(tmp_path), "COLUMNS": "80"}
    if text is None:
        cmd = [sys.executable, "-m", "sweeps.run", f"sweep={name}", "sweep.dry_run=true"]
    else:
        (tmp_path / "sweep").mkdir(exist_ok=True)
        (tmp_path / "sweep" / f"{name}.yaml").write_text(text)
        cmd = sweep_cmd(tmp_path, _corpus(tmp_path), name, "sweep.dry_run=true")
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert all(len(line.rstrip()) <= 80 for line in lines), [x for x in lines if len(x) > 80]
    assert not (tmp_path / "mlruns.db").exists()  # a dry run trains and records nothing
    return lines


def block(lines: list[str]) -> str:
    """The decide block as one string, its wrapped lines joined back."""
    start = lines.index("what this plan can decide (the report's rules; nothing trained yet):")
    return " ".join(line.strip() for line in lines[start:])


def test_a_plan_at_one_token_budget_is_told_what_it_cannot_decide(tmp_path):
    text = block(dry_run(tmp_path, "onebudget", ONE_BUDGET))
    assert "mqa vs base: 2 matched (size, budget) cells -> a cell-by-cell verdict" in text
    assert "1 token budget: C grows only with N" in text
    assert "frontier law of base: 2 budgets C -> none (needs 3)" in text
    assert "seed noise: 1 seed per cell, 0 cells with 2+ -> the report uses the" in text
    assert "default spread 0.059 nats" in text and "add seeds: 2" in text
    assert (
        "L(N, D) of base (Chinchilla approach 3, 5 parameters): 2 sizes x 1 token budget, "
        "2 runs -> not fitted (multipliers only): needs 2+ sizes and 2+ token budgets; "
        "add (e.g. train.tokens: [1.6e4, 4.9e4])"
    ) in text


def test_the_demo_plan_can_give_its_verdicts(tmp_path):
    text = block(dry_run(tmp_path, "demo", None))
    # 2 sizes x 3 budgets per block, each final cell at 2 seeds: every cell matched
    assert "vanilla vs llama: 6 matched (size, budget) cells -> a cell-by-cell verdict" in text
    assert "multipliers at up to 6 budgets C" in text
    assert "seed noise: 2+ seeds in 12 cells -> measured by these runs" in text
    assert "L(N, D) of llama (Chinchilla approach 3, 5 parameters): 2 sizes x 3 token" in text
    assert "12 runs -> fitted" in text
    assert "frontier law" not in text and "not fitted" not in text


def test_a_moe_point_shows_its_active_n(tmp_path):
    from models import count_params
    from models.ladder import model_config

    lines = dry_run(tmp_path, "moe", MOE)
    header = next(i for i, line in enumerate(lines) if line.split()[:1] == ["#"])
    columns = lines[header].split()
    rows = {r.split()[0]: r.split() for r in lines[header + 2 : header + 4]}
    n_at = columns.index("N")
    shown = {r[columns.index("block")]: r[n_at] for r in rows.values()}
    common = {"size": 3e4, "vocab_size": 256, "max_seq_len": 64}
    moe = {"mlp": "moe", "n_experts": 8, "top_k": 2, "n_shared_experts": 1}
    llama = model_config({**_preset("llama"), **common})
    moe_cfg = model_config({**_preset("llama"), **common, **moe})
    dense_n, moe_pc = count_params(llama).non_embedding, count_params(moe_cfg)
    assert moe_pc.non_embedding_active < moe_pc.non_embedding  # the experts not routed to
    assert shown["dense-llama"] == _count(dense_n)
    assert shown["moe-llama"] == _count(moe_pc.non_embedding_active)  # not every expert's
    assert "moe vs dense: 1 matched (size, budget) cells" in block(lines)


def _preset(name: str) -> dict:
    import yaml

    from training.paths import PROJECT_ROOT

    return yaml.safe_load((PROJECT_ROOT / "conf" / "model" / f"{name}.yaml").read_text())


def _count(n: int) -> str:
    from sweeps.plan import format_count

    return format_count(n)


def test_the_restated_thresholds_are_analysis_own():
    from analysis.data import load
    from analysis.fits import identification, isoflop
    from analysis.report import analyse
    from analysis.verdicts import ablation, noise

    assert decide.BUDGET_RTOL == ablation.BUDGET_RTOL
    assert decide.BUDGET_RTOL == inspect.signature(isoflop.budget_groups).parameters["rtol"].default
    assert decide.MIN_SEEDED_CELLS == noise.MIN_SEEDED_CELLS
    assert decide.DEFAULT_NOISE == noise.DEFAULT_NOISE
    assert decide.MIN_LAW_POINTS == ablation.MIN_LAW_POINTS
    assert decide.PARAMETRIC_PARAMS == load.PARAMETRIC_PARAMS
    assert decide.MIN_CONVERGED == identification.MIN_CONVERGED
    assert decide.MIN_PROFILE_SIZES == isoflop.MIN_PROFILE_SIZES
    assert decide.LLAMA == analyse.LLAMA


def test_budget_groups_and_the_runs_approach_3_needs_agree_with_analysis():
    from analysis.fits.bootstrap import distinct, resample_counts
    from analysis.fits.isoflop import budget_groups

    values = [1e6, 1.05e6, 1.3e6, 3e6, 3.2e6, 3.6e6, 1e7]
    assert decide.groups(values) == budget_groups(np.array(values)).tolist()
    need = decide.min_runs()
    assert need == 8
    for n, enough in ((need - 1, False), (need, True)):
        drawn = distinct(resample_counts(n, 20000, seed=0))
        share = np.mean(drawn >= decide.PARAMETRIC_PARAMS)
        assert (share >= decide.MIN_CONVERGED) == enough, (n, share)
