"""What the report calls things: variants by the names a sweep gives them (`--label`, passed by
the sweep's report step), how a tuned cell's lr was chosen where no law can use it, and a
held-out run by its variant and seed rather than its 32-character run id."""

import json

import matplotlib
import numpy as np
import pandas as pd
import pytest

from analysis.data.synthetic import isoflop_runs
from analysis.fits.laws.chinchilla import Parametric
from analysis.report import cli as report
from analysis.tuning import arms as tuning
from analysis.tuning import hparam_laws, hparam_report, tuning_report
from sweeps.points import PlannedRun, RunFacts
from sweeps.sweep_report import arch_labels, report_args

LAW = Parametric(E=1.8, A=480.0, B=1200.0, alpha=0.36, beta=0.30)
SMALL = dict(budgets=(1e17, 1e18, 1e19), sizes_per_budget=4, noise=0.005)
LLAMA, VANILLA = "pre-rmsnorm-rope-gqa2-swiglu", "post-layernorm-sinusoidal-mha-gelu"


def two_archs(tmp_path):
    """Two architectures on one IsoFLOP design, two seeds each: vanilla 3% worse."""
    parts = []
    for arch, worse in ((LLAMA, 1.0), (VANILLA, 1.03)):
        for seed in (0, 1):
            runs = isoflop_runs(LAW, seed=seed, **SMALL)
            parts.append(
                runs.assign(
                    arch=arch,
                    seed=seed,
                    loss=runs["loss"] * worse,
                    run_id=[f"{arch[:4]}{seed}{i:02d}" + "0" * 24 for i in range(len(runs))],
                )
            )
    path = tmp_path / "runs.csv"
    pd.concat(parts, ignore_index=True).to_csv(path, index=False)
    return path


def figure_texts(fig) -> list[str]:
    return [t.get_text() for t in fig.findobj(matplotlib.text.Text)]


def test_labels_name_every_variant_and_runs_csv_keeps_the_values(tmp_path, capsys):
    src = two_archs(tmp_path)
    out = tmp_path / "r"
    args = ["--csv", str(src), "--bootstrap", "20", "--compare", "arch", "--title", "t"]
    labels = ["--label", f"{LLAMA}=llama", "--label", f"{VANILLA}=vanilla"]
    # the baseline by its label (by its value works too: the demo sweep's --baseline)
    assert report.main([*args, *labels, "--baseline", "llama", "--out", str(out)]) == 0
    console = capsys.readouterr().out
    assert "vanilla" in console and VANILLA not in console
    md, html = (out / "report.md").read_text(), (out / "report.html").read_text()
    for text in (md, html):
        assert LLAMA not in text and VANILLA not in text
    assert "Ablations: effective compute multiplier vs 'llama'" in md and "| vanilla |" in md
    res = json.loads((out / "fit.json").read_text())
    assert res["labels"] == {VANILLA: "vanilla", LLAMA: "llama"}
    assert res["ablation"]["baseline"] == "llama"
    assert set(res["ablation"]["variants"]) == {"llama", "vanilla"}
    # runs.csv is the data: the values, so the same --label flags apply to it again
    exported = pd.read_csv(out / "runs.csv")
    assert set(exported["variant"]) == set(exported["arch"]) == {LLAMA, VANILLA}
    again = tmp_path / "again"
    regen = ["--csv", str(out / "runs.csv"), *args[2:], *labels, "--baseline", LLAMA]
    assert report.main([*regen, "--export-only", "--out", str(again)]) == 0
    assert (again / "runs.csv").read_text() == (out / "runs.csv").read_text()
    # the figures' legends name the variants by their labels
    from analysis.report import plots

    plots.setup()
    texts = figure_texts(plots.multipliers(res["ablation"], "6nd"))
    texts += figure_texts(plots.forest(res["ablation"], "6nd"))
    assert "vanilla" in " ".join(texts) and not any(VANILLA in t or LLAMA in t for t in texts)
    # the extrapolation check names a held-out run by variant and seed; the id stays findable
    held = res["extrapolation"]["runs"]
    assert held and all(r["variant"] == "llama" and r["seed"] in (0, 1) for r in held)
    rows = [line for line in md.splitlines() if line.startswith("| llama, seed ")]
    assert len(rows) == len(held)
    for row, r in zip(rows, held):
        assert row.endswith(f"| {r['run_id'][:8]} |") and r["run_id"] not in row
    assert "| run | N | D | loss | predicted | relative error | run id |" in md


@pytest.mark.parametrize(
    "label, message",
    [
        ("vanilla", "--label 'vanilla': expected VALUE=NAME"),
        ("=vanilla", "--label '=vanilla': expected VALUE=NAME"),
        ("post-b=vanilla", f"--label post-b=vanilla: no variant 'post-b' in the --compare column 'arch'; its values: ['{VANILLA}', '{LLAMA}']"),
        (f"{LLAMA}={VANILLA}", f"'{VANILLA}' is already another variant"),
    ],
)  # fmt: skip
def test_a_bad_label_is_one_line_naming_the_flag_and_writes_nothing(
    tmp_path, capsys, label, message
):
    src = two_archs(tmp_path)
    out = tmp_path / "r"
    args = ["--csv", str(src), "--compare", "arch", "--label", label, "--out", str(out)]
    assert report.main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: --label") and message in err[0]
    assert not out.exists()


def test_one_label_per_value():
    from analysis.data.load import InputError
    from analysis.report.analyse import parse_labels

    assert parse_labels(["a=x", "b = y", "a=x"]) == {"a": "x", "b": "y"}
    with pytest.raises(InputError, match="--label a: given two names"):
        parse_labels(["a=x", "a=y"])
    with pytest.raises(InputError, match="--label b=x: 'x' already names another value"):
        parse_labels(["a=x", "b=x"])


# ---------------------------------------------------------------- the sweep passes its names


def planned(index: int, preset: str, arch: str, variant: str = "base", skip=None) -> PlannedRun:
    facts = RunFacts(
        run_key=f"k{index}",
        arch=arch,
        n_layers=2,
        d_model=64,
        n_params=10**5,
        n_params_nonembed=10**5,
        flops_per_token=6e5,
        tokens=2.5e5,
        batch_tokens=1024,
    )
    return PlannedRun(index, (f"model={preset}",), variant, "run", facts, skip=skip)


def test_the_sweep_labels_each_architecture_by_its_one_preset():
    from sweeps.names import RunNames

    block = RunNames([], "model").block
    runs = [planned(0, "vanilla", VANILLA), planned(1, "llama", LLAMA), planned(2, "llama", LLAMA)]
    assert arch_labels(runs, block) == {VANILLA: "vanilla", LLAMA: "llama"}
    # an architecture under two presets, or two under one name: no label for them
    two = [
        *runs,
        planned(3, "llama_alias", LLAMA),
        planned(4, "gpt2", "a"),
        planned(5, "gpt2", "b"),
    ]
    assert arch_labels(two, block) == {VANILLA: "vanilla"}
    assert arch_labels([planned(0, "x", "y", skip="too big")], block) == {}

    labels = {VANILLA: "vanilla", LLAMA: "llama"}
    args = ["--compare", "arch", "--baseline", LLAMA, "--label", f"{LLAMA}=ref"]
    assert report_args(args, labels) == [*args, "--label", f"{VANILLA}=vanilla"]
    assert report_args(["--compare", "variant"], labels) == ["--compare", "variant"]
    assert report_args([], labels) == []


# ---------------------------------------------------------------- a tuned cell's status

LRS = [5e-4, 1e-3, 2e-3, 4e-3, 8e-3]


def tuned_csv(tmp_path, prefixes: bool):
    """A sweep tuned at its smallest budget (5 lrs, the others ranked on a tenth of it:
    curve-law prefixes, else successive halving's stopped runs), the chosen lr transferred to
    two larger budgets; the loss has its minimum in lr at 2e-3."""
    rows = []

    def add(n, d, lr, arm, role, seed=0, budget=None):
        loss = 2 + 400 / n**0.3 + 300 / d**0.3 + 0.3 * np.log(lr / 2e-3) ** 2 + 0.01 * seed
        rows.append(
            {
                "run_id": f"r{len(rows):03d}",
                "variant": "base",
                "seed": seed,
                "N": n,
                "D": d,
                "loss": loss,
                "arm": arm,
                "tune_role": role,
                "tune_budget": budget,
                "train.lr": lr,
            }
        )

    for n in (1e5, 3e5):
        for lr in LRS:
            add(n, 2.5e4, lr, f"a{n:g}", "candidate", budget=2.5e5 if prefixes else None)
        for seed in (0, 1):
            add(n, 2.5e5, 2e-3, f"a{n:g}", "chosen", seed)
            for d in (5e5, 1e6):
                add(n, d, 2e-3, f"t{n:g}{d:g}", "transfer", seed)
    path = tmp_path / "runs.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


@pytest.mark.parametrize("prefixes, how", [(True, "curve prefixes"), (False, "successive halving")])
def test_a_tuned_cell_says_how_its_lr_was_chosen(tmp_path, prefixes, how):
    runs = pd.read_csv(tuned_csv(tmp_path, prefixes))
    _, tuned = tuning.select(runs, ["train.lr"])
    hp = hparam_laws.section(runs, tuned, 20, seed=0)
    by_d = {}
    for c in hp["cells"]:
        by_d.setdefault(c["D"], []).append(c)
    for c in by_d[2.5e5]:
        assert c["status"] == {"lr": "chosen"}
        assert c["how_tuned"] == {"lr": f"chosen from 5 by {how}"}
        assert "1 of 5 values trained the full budget" in c["why"]["lr"]
    for d in (5e5, 1e6):
        for c in by_d[d]:
            assert c["status"] == {"lr": "transferred"}
            assert c["how_tuned"] == {"lr": "transferred from D 2.5e+05"}
    # out of every law for the honest reason: one full-budget value, no curvature
    law = hp["laws"]["lr"]["C"]
    assert law["n_cells"] == 0 and len(law["left_out"]) == 6
    assert all("no curvature to place an optimum" in why for why in law["left_out"].values())
    table = hparam_report.blocks(hp)[2]
    status = [row[-2] for row in table[2]]
    assert status.count(f"lr: chosen from 5 by {how}") == 2
    assert status.count("lr: transferred from D 2.5e+05") == 4 and "untuned" not in str(table)
    (sentence,) = hparam_report.summary_sentences(hp)
    assert "the others: 2 chosen from shorter runs, 4 transferred from another budget" in sentence
    assert "untuned" not in sentence
    # the tuning table and the lr rule say where a transfer's value came from, by arm name
    blocks = tuning_report.blocks(tuned, tuning.lr_rule(tuned, 20, 0))
    rows = {(r[1], r[2]): r[-1] for r in next(b for b in blocks if b[0] == "table")[2]}
    assert rows[("1e+05", "5e+05")] == "one value (transferred from D 2.5e+05)"
    left_out = next(b[1] for b in blocks if b[0] == "p" and b[1].startswith("Left out of"))
    assert "base N 1e+05 D 5e+05: one value of train.lr, transferred from D 2.5e+05" in left_out
    assert not any(a["arm"] in left_out for a in tuned["arms"])  # no arm hash


def test_a_cell_with_one_value_and_no_tuning_is_still_untuned(tmp_path):
    runs = pd.read_csv(tuned_csv(tmp_path, True))
    one = runs[runs["tune_role"] == "transfer"].drop(columns=["tune_role", "tune_budget"])
    _, tuned = tuning.select(one, ["train.lr"])
    hp = hparam_laws.section(one, tuned, 20, seed=0)
    assert {c["status"]["lr"] for c in hp["cells"]} == {"untuned"}
    assert "the others: 4 untuned (fewer than 3 values)" in hparam_report.summary_sentences(hp)[0]
