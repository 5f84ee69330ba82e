"""Granularity as a swept axis: `python -m sweeps.run` plans `model.moe_granularity` as an axis of
a MoE variant at a fixed shape, one architecture per G (the dry run: nothing trained). The report
then groups the configurations by (A, G) (tests/test_analysis_leverage.py)."""

import subprocess

import pytest
from sweep_helpers import _corpus, _env, sweep_cmd, tiny_sweep

AXES = "  model.moe_granularity: [1, 2, 4]\n  train.tokens: [4096]"
FIXED = """  model: llama
  model.n_layers: 2
  model.d_model: 48
  model.d_ff: 128
variants:
  moe8x2: {model.mlp: moe, model.n_experts: 8, model.top_k: 2}
"""


@pytest.mark.slow
def test_the_dry_run_plans_one_architecture_per_granularity(tmp_path):
    (tmp_path / "sweep").mkdir()
    (tmp_path / "sweep" / "g.yaml").write_text(tiny_sweep(AXES, FIXED))
    cmd = sweep_cmd(tmp_path, _corpus(tmp_path), "g", "sweep.dry_run=true")
    out = subprocess.run(cmd, env=_env(tmp_path), capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    for arch in ("moe8x2 ", "moe8x2g2", "moe8x2g4"):  # G = 1 carries no suffix
        assert f"pre-rmsnorm-rope-gqa2-{arch}" in out.stdout
    assert "3 to run, 0 skipped" in out.stdout
    assert not (tmp_path / "mlruns.db").exists()
