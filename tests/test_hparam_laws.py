"""Hyperparameter laws (analysis.tuning.hparam_laws, hparam_surface, critical_batch, hparam_predict):
optima, near-optimal regions and laws recovered from runs generated on a known (lr, batch)
surface; edges, flat surfaces and thin designs reported as not identified; the published
DeepSeek LLM and Step Law constants reproduce the papers' own example values."""

import argparse
import json
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analysis.data import synthetic
from analysis.fits import fit, predict
from analysis.report import analyse
from analysis.report import cli as report
from analysis.tuning import arms as tuning
from analysis.tuning import hparam_laws, hparam_report

KEYS = ["train.lr", "train.batch_tokens"]
LR_GRID = [float(x) for x in 2.0 ** np.arange(-7, 1)]  # 0.0078 .. 1
BATCH_GRID = [float(x) for x in 2.0 ** np.arange(11, 19)]  # 2048 .. 262144 tokens
CELLS = [(N, m * N) for N in (1e4, 3e4, 1e5) for m in (20, 80)]  # 3 sizes x 2 budgets
ROOT = Path(__file__).resolve().parents[1]
PUBLISHED = ROOT / "conf" / "published"


def laws_of(runs: pd.DataFrame, n_boot: int = 400) -> dict:
    _, tuned = tuning.select(runs, KEYS)
    return hparam_laws.section(runs, tuned, n_boot, seed=0)


def test_noise_free_cell_optimum_is_the_true_one():
    truth = synthetic.HparamTruth()
    hp = laws_of(synthetic.hparam_runs(truth, CELLS, LR_GRID, BATCH_GRID), n_boot=20)
    for c in hp["cells"]:
        assert c["method"].startswith("quadratic")
        assert c["status"] == {"lr": "identified", "batch": "identified"}
        assert c["optimum"]["lr"] == pytest.approx(float(truth.lr_opt(c["N"], c["D"])), rel=1e-6)
        assert c["optimum"]["batch"] == pytest.approx(float(truth.batch_opt(c["D"])), rel=1e-6)
        # the near-optimal region holds the best point and only points within 0.5% of it
        pts = pd.DataFrame(c["points"], columns=c["point_columns"])
        near = pts[pts["loss"] <= c["best"]["loss"] * 1.005]
        assert c["near_optimal"]["n_points"] == len(near) >= 1
        assert c["near_optimal"]["lr"] == [near["lr"].min(), near["lr"].max()]


def test_step_law_exponents_recovered_with_intervals():
    truth = synthetic.HparamTruth()  # lr* = 2 N^-0.5 D^0.2, B* = 20 D^0.5
    hp = laws_of(synthetic.hparam_runs(truth, CELLS, LR_GRID, BATCH_GRID, noise=0.001))
    lr = hp["laws"]["lr"]["N_D"]
    assert lr["not_identified"] == []
    for v, true in (("N", truth.lr_N), ("D", truth.lr_D)):
        lo, hi = lr["ci95"][v]
        assert lo <= true <= hi and abs(lr["exponents"][v] - true) < 0.05
    batch = hp["laws"]["batch"]["D"]
    assert batch["not_identified"] == []
    assert batch["ci95"]["exponent"][0] <= truth.batch_D <= batch["ci95"]["exponent"][1]
    assert abs(batch["exponent"] - truth.batch_D) < 0.05
    # batch in (N, D): the N exponent is ~0, as the surface has none
    assert abs(hp["laws"]["batch"]["N_D"]["exponents"]["N"]) < 0.05
    # the rules sweeps read: Step Law's lr form, batch from D (the contract's formats)
    assert set(hp["rules"]["lr"]["exponents"]) == {"N", "D"}
    assert hp["rules"]["batch"]["variable"] == "D"
    # critical batch: B* x a constant factor on this surface, so its exponent is B*'s
    crit = hp["critical_batch"]["law"]
    assert crit["not_identified"] == [] and abs(crit["exponent"] - truth.batch_D) < 0.1
    for c in hp["critical_batch"]["cells"]:
        assert c["B_crit"] > c["best_batch"]


def test_deepseek_form_recovered_in_compute():
    # lr* = s (N D)^-0.125 is DeepSeek's lr_opt = a C^-0.125 with C = 6 N D
    truth = synthetic.HparamTruth(lr_scale=0.3, lr_N=-0.125, lr_D=-0.125)
    hp = laws_of(synthetic.hparam_runs(truth, CELLS, LR_GRID, BATCH_GRID, noise=0.001))
    law = hp["laws"]["lr"]["C"]
    assert law["not_identified"] == []
    assert law["ci95"]["exponent"][0] <= -0.125 <= law["ci95"]["exponent"][1]
    assert law["scale"] == pytest.approx(0.3 * 6**0.125, rel=0.3)


def test_optimum_on_the_grid_edge_is_not_identified():
    truth = synthetic.HparamTruth()
    low_lrs = [float(x) for x in 2.0 ** np.arange(-12, -5)]  # every cell's optimum is above
    hp = laws_of(synthetic.hparam_runs(truth, CELLS, low_lrs, BATCH_GRID, noise=0.001))
    assert {c["status"]["lr"] for c in hp["cells"]} == {"edge"}
    assert all("highest grid value" in c["why"]["lr"] for c in hp["cells"])
    for law in hp["laws"]["lr"].values():
        assert set(law["not_identified"]) >= {"scale"} and law["n_cells"] == 0
        assert len(law["left_out"]) == len(CELLS)
    assert hp["rules"]["lr"] is None
    assert hp["rules"]["batch"] is not None  # the batch optima are still inside their grid


def test_flat_surface_is_not_identified():
    truth = synthetic.HparamTruth(curvature_lr=0.0)  # the loss does not depend on lr
    hp = laws_of(synthetic.hparam_runs(truth, CELLS, LR_GRID, BATCH_GRID, noise=0.0005))
    statuses = {c["status"]["lr"] for c in hp["cells"]}
    assert statuses <= {"flat", "edge"} and "flat" in statuses
    assert all(law["not_identified"] for law in hp["laws"]["lr"].values())
    assert hp["rules"]["lr"] is None


def test_thin_designs_are_not_identified():
    truth = synthetic.HparamTruth()
    two = laws_of(synthetic.hparam_runs(truth, CELLS[:2], LR_GRID, BATCH_GRID, noise=0.001))
    assert all(law["not_identified"] for law in two["laws"]["lr"].values())
    assert "2 distinct" in two["laws"]["batch"]["C"]["why_not_identified"]["exponent"]
    # every cell at 20 tokens per parameter: N and D move together, Step Law's form cannot
    # split their exponents
    line = [(N, 20 * N) for N in (1e4, 2e4, 4e4, 8e4, 1.6e5, 3.2e5)]
    hp = laws_of(synthetic.hparam_runs(truth, line, LR_GRID, BATCH_GRID, noise=0.001))
    why = hp["laws"]["lr"]["N_D"]["why_not_identified"]["N"]
    assert "move together" in why


def test_a_law_in_compute_needs_optima_at_two_budgets_and_two_sizes():
    # every cell at one D: C = 6 N D varies only through N, so no law in C (nor in D) is
    # identified and no batch_rule is written, though the N-trend at that D is clean
    truth = synthetic.HparamTruth()
    one_d = [(N, 2e6) for N in (1e4, 3e4, 1e5)]
    hp = laws_of(synthetic.hparam_runs(truth, one_d, LR_GRID, BATCH_GRID, noise=0.001))
    for role in ("lr", "batch"):
        law = hp["laws"][role]["C"]
        assert law["n_cells"] == 3 and set(law["not_identified"]) == {"scale", "exponent"}
        assert "C varies only through N" in law["why_not_identified"]["exponent"]
    assert hp["rules"]["batch"] is None and "batch_rule" not in fit.hparam_entries(hp)
    summary = hparam_report.summary_sentences(hp)
    assert all("no law identified" in s and "C varies only through N" in s for s in summary)
    # every cell at one N: C varies only through D
    one_n = [(3e4, m * 3e4) for m in (20, 40, 80)]
    hp = laws_of(synthetic.hparam_runs(truth, one_n, LR_GRID, BATCH_GRID, noise=0.001))
    assert "C varies only through D" in hp["laws"]["lr"]["C"]["why_not_identified"]["exponent"]
    assert hp["laws"]["batch"]["D"]["not_identified"] == []  # B* in D alone is still measured


def test_fit_json_holds_batch_rule_only_when_identified(tmp_path):
    truth = synthetic.HparamTruth()
    runs = synthetic.hparam_runs(truth, CELLS, LR_GRID, BATCH_GRID, noise=0.001)
    selected, tuned = tuning.select(runs, KEYS)
    hp = hparam_laws.section(runs, tuned, 100, 0)
    entries = fit.hparam_entries(hp)
    assert entries["batch_rule"]["key"] == "train.batch_tokens"
    assert {"scale", "exponent", "variable", "ci95"} <= set(entries["batch_rule"])
    small = [float(x) for x in 2.0 ** np.arange(3, 9)]  # every optimum above the grid
    edge = synthetic.hparam_runs(truth, CELLS, LR_GRID, small, noise=0.001)
    _, tuned = tuning.select(edge, KEYS)
    assert "batch_rule" not in fit.hparam_entries(hparam_laws.section(edge, tuned, 100, 0))


# ---------------------------------------------------------------- predict


def run_predict(args: list[str], out: Path) -> pd.DataFrame:
    assert predict.main(["--hparams", *args, "--out", str(out)]) == 0
    return pd.read_csv(out).set_index("key")


def deepseek_m(n_layer: int, d_model: int, l_seq: int = 4096) -> float:
    """Non-embedding FLOPs per token, DeepSeek LLM sec. 3.2: 72 n d^2 + 12 n d l."""
    return 72 * n_layer * d_model**2 + 12 * n_layer * d_model * l_seq


@pytest.mark.parametrize(
    "n_layer, d_model, lr, batch_seqs, lr_rtol, batch_rtol",
    [
        # DeepSeek LLM Table 2: 7B (30 layers, d 4096) lr 4.2e-4, batch 2304 x 4096 tokens;
        # 67B (95 layers, d 8192) lr 3.2e-4, batch 4608 x 4096; both 2T tokens. The 67B batch
        # was chosen 9% below eq. (1)'s value (within their near-optimal band).
        (30, 4096, 4.2e-4, 2304, 0.03, 0.05),
        (95, 8192, 3.2e-4, 4608, 0.05, 0.10),
    ],
)
def test_deepseek_constants_give_their_models_values(
    tmp_path, n_layer, d_model, lr, batch_seqs, lr_rtol, batch_rtol
):
    C = deepseek_m(n_layer, d_model) * 2e12
    got = run_predict(
        ["--fit", str(PUBLISHED / "deepseek_llm.json"), "--C", f"{C}"], tmp_path / "p.csv"
    )
    assert got.loc["train.lr", "value"] == pytest.approx(lr, rel=lr_rtol)
    assert got.loc["train.batch_tokens", "value"] == pytest.approx(
        batch_seqs * 4096, rel=batch_rtol
    )
    assert math.isnan(got.loc["train.lr", "lo"])  # a paper's constants: no interval


def test_step_law_constants_match_the_authors_tool(tmp_path):
    # the README example of github.com/step-law/steplaw (pred-opt-lr-bs 7e9 1.4e12 2048): its
    # tool predicts with the mean of the 1000 released bootstrap fits
    # (data/1004_fitted_lr_bs_scaling_model_parameters.csv, means below)
    N, D = 7e9, 1.4e12
    lr_tool = math.exp(0.586308) * N**-0.712922 * D**0.307491
    batch_tool = math.exp(-0.543542) * D**0.570944
    got = run_predict(
        ["--fit", str(PUBLISHED / "step_law.json"), "--N", "7e9", "--D", "1.4e12"],
        tmp_path / "p.csv",
    )
    # the paper's 3-digit constants move lr by 2% at 1.4e12 tokens (D^0.307 vs D^0.3075)
    assert got.loc["train.lr", "value"] == pytest.approx(lr_tool, rel=0.025)
    assert got.loc["train.batch_tokens", "value"] == pytest.approx(batch_tool, rel=0.005)
    # Step Law's rules need N and D: C alone answers neither, which is one line and exit 2
    only_c = ["--hparams", "--fit", str(PUBLISHED / "step_law.json"), "--C", "1e21"]
    assert predict.main([*only_c, "--out", str(tmp_path / "c.csv")]) == 2
    assert not (tmp_path / "c.csv").exists()


def test_the_help_example_answers_or_says_in_one_line_what_it_needs(tmp_path, capsys):
    """`--hparams --fit fit.json --C 1e21` with an lr rule in N (the demo's full grid): no NaN
    row and exit 0, but one line naming the rule, what it needs and a question that answers;
    the help's own example (--C with --N) answers with an interval."""
    fit_json = ROOT / "results" / "demo" / "full_grid" / "fit.json"
    rule = json.loads(fit_json.read_text())["lr_rule"]
    assert rule.get("variable", "N") == "N"
    assert predict.main(["--hparams", "--fit", str(fit_json), "--C", "1e21"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: no rule can answer at --C 1e+21")
    assert "train.lr" in err and "needs N" in err and "--N" in err
    example = re.search(r"--hparams --fit fit.json (--C \S+ --N \S+)", predict.__doc__).group(1)
    got = run_predict(["--fit", str(fit_json), *example.split()], tmp_path / "p.csv")
    lr = got.loc["train.lr"]
    N = float(example.split()[3])
    assert lr["value"] == pytest.approx(rule["scale"] * N ** rule["exponent"])
    assert 0 < lr["lo"] <= lr["value"] <= lr["hi"]


def test_predict_from_a_fitted_law_covers_the_truth(tmp_path):
    truth = synthetic.HparamTruth()
    runs = synthetic.hparam_runs(truth, CELLS, LR_GRID, BATCH_GRID, noise=0.001)
    selected, tuned = tuning.select(runs, KEYS)
    fit_json = tmp_path / "fit.json"
    fit_json.write_text(fit.dumps(fit.hparam_entries(hparam_laws.section(runs, tuned, 400, 0))))
    N, D = 5e4, 1e6  # inside the cells' range
    got = run_predict(["--fit", str(fit_json), "--N", f"{N}", "--D", f"{D}"], tmp_path / "p.csv")
    for key, true in (("train.lr", truth.lr_opt(N, D)), ("train.batch_tokens", truth.batch_opt(D))):
        assert got.loc[key, "lo"] <= true <= got.loc[key, "hi"]
    # at C alone the DeepSeek-form laws answer (with their own intervals)
    at_c = run_predict(["--fit", str(fit_json), "--C", f"{6 * N * D}"], tmp_path / "c.csv")
    assert "C^" in at_c.loc["train.lr", "law"] and at_c.loc["train.lr", "lo"] > 0


@pytest.mark.parametrize(
    "args, message",
    [
        (["--fit", "PUB"], "give the budget"),
        (["--fit", "PUB", "--C", "-1"], "--C must be a positive number"),
        (["--fit", "EMPTY", "--C", "1e21"], "no identified lr_rule or batch_rule"),
        (["--fit", "missing.json", "--C", "1e21"], "--fit: no such file"),
    ],
)
def test_predict_bad_input_is_one_line(tmp_path, capsys, args, message):
    empty = tmp_path / "empty.json"
    empty.write_text(
        json.dumps({"lr_rule": {"scale": 1, "exponent": 0, "not_identified": ["scale"]}})
    )
    subs = {"PUB": str(PUBLISHED / "deepseek_llm.json"), "EMPTY": str(empty)}
    args = [subs.get(a, a) for a in args]
    assert predict.main(["--hparams", *args, "--out", str(tmp_path / "p.csv")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and message in err and "\n" not in err
    assert not (tmp_path / "p.csv").exists()


@pytest.mark.slow
def test_report_draws_the_surface_and_states_the_laws(tmp_path):
    truth = synthetic.HparamTruth()
    csv = tmp_path / "runs.csv"
    synthetic.hparam_runs(truth, CELLS, LR_GRID, BATCH_GRID, noise=0.001).to_csv(csv, index=False)
    out = tmp_path / "report"
    args = ["--csv", str(csv), "--tune", "train.lr", "--tune", "train.batch_tokens"]
    assert report.main([*args, "--bootstrap", "20", "--out", str(out)]) == 0
    assert (out / "figures" / "hparam_surface.svg").is_file()
    md = (out / "report.md").read_text()
    assert "## Hyperparameter laws" in md and "Optimal batch size (tokens) over 6 cells" in md
    saved = json.loads((out / "fit.json").read_text())
    assert saved["batch_rule"]["variable"] == "D"
    assert saved["hparam_laws"]["rules"]["lr"]["exponents"].keys() == {"N", "D"}


def test_a_key_that_follows_from_the_batch_is_no_axis():
    # a WSD decay start in whole batches differs with the batch: a report infers it as tuned,
    # and the surface must still hold every batch (holding it at its best would keep one)
    truth = synthetic.HparamTruth()
    runs = synthetic.hparam_runs(truth, CELLS, LR_GRID, BATCH_GRID, noise=0.001)
    runs["train.decay_start_tokens"] = (0.8 * runs["D"] // runs["train.batch_tokens"]) * runs[
        "train.batch_tokens"
    ]
    _, tuned = tuning.select(runs, [*KEYS, "train.decay_start_tokens"])
    hp = hparam_laws.section(runs, tuned, 100, 0)
    assert all(c["grid"]["batch"] == BATCH_GRID for c in hp["cells"])
    assert hp["laws"]["batch"]["D"]["not_identified"] == []


def test_a_larger_batch_training_fewer_whole_steps_is_full_length():
    # D = whole steps x batch: the larger batches stop short of the token budget by up to one
    # batch (1.7% at D = 2e5, B = 65536), and are still the grid's full-length runs
    truth = synthetic.HparamTruth()
    batches = BATCH_GRID[:6]  # 2048 .. 65536 tokens
    runs = synthetic.hparam_runs(truth, CELLS, LR_GRID, batches, noise=0.001)
    budget = runs["D"].copy()
    runs["D"] = (budget // runs["train.batch_tokens"]) * runs["train.batch_tokens"]
    assert (runs["D"] < budget / 1.01).any() and (runs["D"] > 0).all()
    _, tuned = tuning.select(runs, KEYS)
    assert tuned["n_stopped_early"] == 0
    hp = hparam_laws.section(runs, tuned, 100, 0)
    assert all(c["grid"]["batch"] == batches for c in hp["cells"])


def test_report_infers_lr_and_batch_as_the_tuned_keys():
    runs = synthetic.hparam_runs(synthetic.HparamTruth(), CELLS[:2], LR_GRID, BATCH_GRID)
    runs["train.decay_start_tokens"] = (0.8 * runs["D"] // runs["train.batch_tokens"]) * runs[
        "train.batch_tokens"
    ]
    args = argparse.Namespace(baseline=None, compare="variant", tune=None)
    notes = analyse.fill_defaults(args, runs)
    assert args.tune == KEYS and "--tune train.lr --tune train.batch_tokens" in notes[-1]


def test_a_law_is_checked_against_its_own_optima():
    """Optima on lr = 0.5 N^-0.5 (a grid of factor-2 steps: half a step is 0.35 in log) are
    described; one optimum moved 4 grid steps off makes the law miss it, and then nothing of
    the law is identified, with the worst cell named."""
    grid = [1e-4 * 2**i for i in range(12)]
    cells = []
    for i, N in enumerate([1e5, 2e5, 4e5, 8e5, 1.6e6]):
        for D in (1e8, 4e8):
            y = 0.5 * N**-0.5 * (16 if (i, D) == (2, 1e8) else 1)
            cells.append(
                {
                    "arm": f"a{i}-{D:g}",
                    "N": N,
                    "D": D,
                    "C": 6 * N * D,
                    "grid": {"lr": grid},
                    "status": {"lr": "identified"},
                    "optimum": {"lr": y},
                    "why": {"lr": None},
                }
            )
    law = hparam_laws.laws_for(cells, "lr", "train.lr", 200, 0)["N_D"]
    assert law["law_check"]["n_outside"] >= 1 and not law["law_check"]["describes"]
    assert law["law_check"]["worst"]["label"] == "a2-1e+08"
    assert "does not describe its optima" in law["why_not_identified"]["scale"]
    clean = [{**c, "optimum": {"lr": 0.5 * c["N"] ** -0.5}} for c in cells]
    law = hparam_laws.laws_for(clean, "lr", "train.lr", 200, 0)["N_D"]
    assert law["law_check"]["describes"]
    assert hparam_laws.grid_resolution(cells, "lr") == pytest.approx(np.log(2) / 2)
