"""The analysis fits one law per model family and refuses to pool or compare families by loss
(their objectives' losses are not comparable)."""

from __future__ import annotations

import json

import pandas as pd

from analysis.data.families import family_of
from analysis.data.synthetic import isoflop_runs
from analysis.fits import cli as fit_cli
from analysis.fits.laws.chinchilla import Parametric
from analysis.report import cli as report

LAW = Parametric(E=1.8, A=480.0, B=1200.0, alpha=0.36, beta=0.30)
SMALL = dict(budgets=(1e17, 1e18, 1e19), sizes_per_budget=4, noise=0.005)
ARCH = "post-layernorm-sinusoidal-mha-gelu"  # ModelConfig.arch of conf/model/vanilla.yaml


def two_families(tmp_path):
    """A decoder's and an encoder's runs (the same arch otherwise, as a families sweep)."""
    path = tmp_path / "runs.csv"
    pd.concat(
        [
            isoflop_runs(LAW, seed=0, **SMALL).assign(arch=ARCH),
            isoflop_runs(LAW, seed=1, **SMALL).assign(
                arch=f"encoder-{ARCH}", run_id=lambda f: "enc-" + f["run_id"]
            ),
        ]
    ).drop(columns=["C"]).to_csv(path, index=False)
    return path


def test_family_of_reads_the_arch_signature():
    assert family_of(ARCH) == "decoder"
    assert family_of(f"encoder-{ARCH}") == "encoder"
    assert family_of(f"encoder_decoder-{ARCH}") == "encoder_decoder"


def test_fit_refuses_to_pool_families_and_fits_one_law_per_family(tmp_path, capsys):
    src, out = two_families(tmp_path), tmp_path / "fit.json"
    common = ["--csv", str(src), "--bootstrap", "20", "--holdout-above", "1e30"]
    assert fit_cli.main([*common, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        "error: the selection holds model families ['decoder', 'encoder']: one scaling law "
        "per family (losses of different objectives are not comparable); fit one law per "
        "family with --group family"
    )
    assert not out.exists()
    # a grouping that still pools families (here: by variant, one for all) is refused as well
    assert fit_cli.main([*common, "--group", "variant", "--out", str(out)]) == 2
    assert "group variant=base holds model families" in capsys.readouterr().err and not out.exists()
    assert fit_cli.main([*common, "--group", "family", "--out", str(out)]) == 0
    res = json.loads(out.read_text())
    assert res["group_by"] == "family" and sorted(res["groups"]) == ["decoder", "encoder"]
    alphas = {k: g["parametric"]["alpha"] for k, g in res["groups"].items()}
    assert all(abs(a - LAW.alpha) < 0.1 for a in alphas.values()), alphas


def test_report_refuses_to_compare_families_by_loss(tmp_path, capsys):
    src, out = two_families(tmp_path), tmp_path / "r"
    args = ["--csv", str(src), "--bootstrap", "20", "--compare", "arch", "--baseline", ARCH]
    assert report.main([*args, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert (
        "the selection holds model families ['decoder', 'encoder']" in err
        and "--group family" in err
    )
    assert len(err.strip().splitlines()) == 1 and not out.exists()
