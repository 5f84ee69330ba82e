"""An encoder-decoder's C is k x 6ND (each token passes one stack): the analysis reads k from
the runs and uses it in every conversion between C and D; a decoder's analysis is unchanged."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from analysis.data.synthetic import isoflop_runs
from analysis.fits import cli as fit_cli
from analysis.fits import predict
from analysis.fits.laws.chinchilla import Parametric
from analysis.report import cli as report

LAW = Parametric(E=1.8, A=480.0, B=1200.0, alpha=0.36, beta=0.30)
SMALL = dict(budgets=(1e17, 1e18, 1e19), sizes_per_budget=5, noise=0.002)
ARCH = "pre-rmsnorm-rope-gqa2-swiglu"  # ModelConfig.arch of the llama preset
K = 0.5045  # the reference families sweep's encoder_decoder runs log 0.5044-0.5047
FAST = ["--bootstrap", "20", "--holdout-above", "1e30"]


def optimum(law: Parametric, C: float, k: float) -> tuple[float, float]:
    """Chinchilla's closed form under k 6 N D = C (Hoffmann et al. 2022, eq. 4 with C/6k):
    N_opt = G (C/6k)^a, D_opt = (C/6k)^b / G, G = (alpha A / (beta B))^(1/(alpha+beta))."""
    G = (law.alpha * law.A / (law.beta * law.B)) ** (1 / (law.alpha + law.beta))
    half = C / (6 * k)
    return G * half**law.a, half**law.b / G


def encoder_decoder_csv(tmp_path, k: float = K, with_d: bool = True):
    """Synthetic encoder_decoder runs of LAW at IsoFLOP budgets of C = k 6 N D (without the
    column D: the analysis derives it from C)."""
    runs = isoflop_runs(LAW, seed=3, k=k, **SMALL).assign(arch=f"encoder_decoder-{ARCH}")
    assert np.allclose(runs["C"], k * 6 * runs["N"] * runs["D"], rtol=1e-12)
    path = tmp_path / ("runs.csv" if with_d else "runs_without_d.csv")
    (runs if with_d else runs.drop(columns=["D"])).to_csv(path, index=False)
    return path, runs


def test_encoder_decoder_fit_recovers_the_law_and_its_d_opt_under_its_k(tmp_path, capsys):
    src, runs = encoder_decoder_csv(tmp_path)
    out = tmp_path / "fit.json"
    assert fit_cli.main(["--csv", str(src), *FAST, "--budget", "1e19", "--out", str(out)]) == 0
    res = json.loads(out.read_text())
    assert res["compute_convention"]["k"] == K and "both stacks" in res["compute_convention"]["N"]
    p = res["parametric"]
    assert p["k"] == K
    # the law's exponents, and the allocation of the FITTED law by the closed form under k
    assert abs(p["a"] - LAW.a) < 0.02 and abs(p["b"] - LAW.b) < 0.02, (p["a"], p["b"])
    fitted = Parametric(**{q: p[q] for q in ("E", "A", "B", "alpha", "beta")})
    row = p["allocation"][0]
    n_opt, d_opt = optimum(fitted, 1e19, K)
    assert np.isclose(row["N_opt"], n_opt, rtol=1e-9) and np.isclose(row["D_opt"], d_opt, rtol=1e-9)
    assert np.isclose(K * 6 * row["N_opt"] * row["D_opt"], 1e19, rtol=1e-9)
    # ... and close to the true law's optimum; under C = 6ND (k = 1) it would be 1.36x off
    true_n, true_d = optimum(LAW, 1e19, K)
    assert abs(row["D_opt"] / true_d - 1) < 0.08, (row["D_opt"], true_d)
    assert abs(optimum(LAW, 1e19, 1.0)[1] / true_d - 1) > 0.3
    # approach 2: every budget's D_opt = C / (6 k N_opt)
    for o in res["isoflop"]["per_budget"]:
        assert np.isclose(o["D_opt"], o["C"] / (6 * K * o["N_opt"]), rtol=1e-12)
    assert abs(res["isoflop"]["b"] - LAW.b) < 0.03
    assert "C = 1e+19 (k 6ND, k = 0.5045)" in capsys.readouterr().out

    # a CSV without D: D = C / (6 k N), the same runs
    src2, _ = encoder_decoder_csv(tmp_path, with_d=False)
    out2 = tmp_path / "fit2.json"
    assert fit_cli.main(["--csv", str(src2), *FAST, "--budget", "1e19", "--out", str(out2)]) == 0
    p2 = json.loads(out2.read_text())["parametric"]
    assert np.isclose(p2["alpha"], p["alpha"], rtol=1e-6) and np.isclose(
        p2["beta"], p["beta"], rtol=1e-6
    )

    # predictions under the same k: the compute-optimal point at C, and D of (N, C)
    points = tmp_path / "points.csv"
    pd.DataFrame({"C": [1e19]}).to_csv(points, index=False)
    pred_out = tmp_path / "pred.csv"
    assert predict.main(["--fit", str(out), "--csv", str(points), "--out", str(pred_out)]) == 0
    pred = pd.read_csv(pred_out).iloc[0]
    assert np.isclose(pred["N"], row["N_opt"], rtol=1e-9) and np.isclose(
        pred["D"], row["D_opt"], rtol=1e-9
    )
    pd.DataFrame({"N": [1e8], "C": [1e19]}).to_csv(points, index=False)
    assert predict.main(["--fit", str(out), "--csv", str(points), "--out", str(pred_out)]) == 0
    pred = pd.read_csv(pred_out).iloc[0]
    assert np.isclose(pred["D"], 1e19 / (6 * K * 1e8), rtol=1e-12)
    assert np.isclose(pred["loss_pred"], fitted.predict(1e8, 1e19 / (6 * K * 1e8)), rtol=1e-9)


def test_exact_flops_per_token_is_6kn_plus_the_rest(tmp_path):
    """--compute exact: f(N) = 6 k N + c N^q, and C_exact must exceed k 6 N D (not 6 N D)."""
    runs = isoflop_runs(LAW, seed=3, k=K, **SMALL).assign(arch=f"encoder_decoder-{ARCH}")
    c, q = 40.0, 0.5  # attention and head: exact FLOPs per token = 6 k N + c N^q
    runs["C_exact"] = (6 * K * runs["N"] + c * runs["N"] ** q) * runs["D"]
    assert (runs["C_exact"] < 6 * runs["N"] * runs["D"]).all()  # below 6 N D, above k 6 N D
    src, out = tmp_path / "runs.csv", tmp_path / "fit.json"
    runs.to_csv(src, index=False)
    assert fit_cli.main(["--csv", str(src), *FAST, "--compute", "exact", "--out", str(out)]) == 0
    f = json.loads(out.read_text())["parametric"]["flops_per_token"]
    assert np.isclose(f["c"], c, rtol=1e-6) and np.isclose(f["q"], q, rtol=1e-6)


def test_decoder_fit_is_unchanged_and_a_csv_without_k_is_a_decoder(tmp_path):
    runs = isoflop_runs(LAW, seed=4, **SMALL).assign(arch=ARCH)
    assert "k" not in runs.columns
    plain, ones = tmp_path / "plain.csv", tmp_path / "ones.csv"
    runs.to_csv(plain, index=False)
    runs.assign(k=1.0).to_csv(ones, index=False)
    outs = []
    for src in (plain, ones):
        outs.append(tmp_path / f"{src.stem}.json")
        assert (
            fit_cli.main(["--csv", str(src), *FAST, "--budget", "1e19", "--out", str(outs[-1])])
            == 0
        )
    # a k of 1 is the decoder convention: the same file, without a compute_convention
    text = [o.read_text().replace(str(tmp_path), "") for o in outs]
    assert text[0].replace("plain.csv", "") == text[1].replace("ones.csv", "")
    res = json.loads(text[0])
    assert "compute_convention" not in res and "k" not in res["parametric"]
    row = res["parametric"]["allocation"][0]
    assert np.isclose(6 * row["N_opt"] * row["D_opt"], 1e19, rtol=1e-9)


def test_mixed_k_in_one_fit_is_refused_in_one_line(tmp_path, capsys):
    runs = pd.concat(
        [
            isoflop_runs(LAW, seed=5, k=K, **SMALL),
            isoflop_runs(LAW, seed=6, k=1.0, variant="other", **SMALL).assign(k=1.0),
        ]
    )
    src, out = tmp_path / "runs.csv", tmp_path / "fit.json"
    runs.to_csv(src, index=False)  # no arch: one family as far as the analysis can tell
    assert fit_cli.main(["--csv", str(src), *FAST, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and not out.exists()
    assert err.startswith(
        "error: the selection mix compute conventions: k = C / (6 N D) from 0.5045 to 1"
    )
    bad = tmp_path / "bad.csv"
    runs.assign(k=-1.0).to_csv(bad, index=False)
    assert fit_cli.main(["--csv", str(bad), *FAST, "--out", str(out)]) == 2
    assert "column 'k' (C / 6 N D) has" in capsys.readouterr().err and not out.exists()


def test_families_report_has_a_section_per_family_and_compares_no_loss(tmp_path, capsys):
    decoder = isoflop_runs(LAW, seed=0, **SMALL).assign(arch=ARCH)
    encdec = isoflop_runs(LAW, seed=1, k=K, **SMALL).assign(arch=f"encoder_decoder-{ARCH}")
    src = tmp_path / "runs.csv"
    pd.concat([decoder, encdec.assign(run_id="ed-" + encdec["run_id"])]).to_csv(src, index=False)
    out = tmp_path / "r"
    args = ["--csv", str(src), *FAST, "--budget", "1e19", "--title", "fam"]
    assert report.main([*args, "--out", str(out)]) == 2  # the single-family report refuses
    assert "--group family" in capsys.readouterr().err and not out.exists()
    assert report.main([*args, "--group", "family", "--out", str(out)]) == 0
    md = (out / "report.md").read_text()
    headings = [line[3:] for line in md.splitlines() if line.startswith("## ")]
    assert headings[0] == "Summary"
    for family in ("decoder", "encoder_decoder"):
        assert f"Family {family}: summary" in headings
        assert (
            f"Family {family}: Approach 3: parametric fit L(N, D) = E + A/N^alpha + B/D^beta"
            in headings
        )
        assert (out / "figures" / family / "loss_vs_compute.svg").is_file()
        assert f"](figures/{family}/contours.png)" in md
    summary = md.split("## Summary", 1)[1].split("\n## ", 1)[0]
    tables = [line for line in summary.splitlines() if line.startswith("| family")]
    assert tables == [
        "| family | runs fitted | a (N_opt ~ C^a) | b (D_opt ~ C^b) |",
        "| family | C (FLOPs) | N_opt | D_opt | tokens per parameter |",
        "| family | k = C / (6 N D) | D counts |",
    ]
    assert "Losses are not compared across families" in summary
    assert "| encoder_decoder | 0.5045 |" in summary
    res = json.loads((out / "fit.json").read_text())
    assert res["group_by"] == "family" and list(res["groups"]) == ["decoder", "encoder_decoder"]
    comp = res["comparison"]
    for family, k in (("decoder", 1.0), ("encoder_decoder", K)):
        p = res["groups"][family]["parametric"]
        assert comp[family]["k"] == k and comp[family]["a"] == p["a"]
        assert comp[family]["allocation"] == p["allocation"]
        assert not {"E", "A", "B", "alpha", "beta"} & set(
            comp[family]
        ) and "loss" not in json.dumps(comp)
        row = p["allocation"][0]  # every family's allocation at the same budget, its own k
        assert row["C"] == 1e19 and np.isclose(k * 6 * row["N_opt"] * row["D_opt"], 1e19, rtol=1e-9)
    assert "compute_convention" not in res["groups"]["decoder"]
    assert res["groups"]["encoder_decoder"]["compute_convention"]["k"] == K
    # regenerable from its own runs.csv: the same files
    again = tmp_path / "again"
    rerun = ["--csv", str(out / "runs.csv"), *FAST, "--budget", "1e19", "--title", "fam"]
    assert report.main([*rerun, "--group", "family", "--out", str(again)]) == 0
    for name in ("report.md", "report.html", "fit.json", "runs.csv"):
        assert (again / name).read_bytes() == (out / name).read_bytes(), name


def test_an_encoder_decoder_on_paired_data_is_never_pooled_with_span_corruption(tmp_path, capsys):
    # the same family, two objectives (objective.name, as the runs log it): two losses, two laws
    span = isoflop_runs(LAW, seed=7, k=K, **SMALL).assign(arch=f"encoder_decoder-{ARCH}")
    pairs = isoflop_runs(LAW, seed=8, k=0.5, **SMALL).assign(arch=f"encoder_decoder-{ARCH}")
    runs = pd.concat(
        [
            span.assign(**{"objective.name": "span_corruption"}),
            pairs.assign(run_id="p-" + pairs["run_id"], **{"objective.name": "seq2seq_pairs"}),
        ]
    )
    src, out = tmp_path / "runs.csv", tmp_path / "fit.json"
    runs.to_csv(src, index=False)
    assert fit_cli.main(["--csv", str(src), *FAST, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and not out.exists()
    assert "['encoder_decoder', 'encoder_decoder/seq2seq_pairs']" in err
    assert fit_cli.main(["--csv", str(src), *FAST, "--group", "family", "--out", str(out)]) == 0
    res = json.loads(out.read_text())
    assert list(res["groups"]) == ["encoder_decoder", "encoder_decoder/seq2seq_pairs"]
    conv = res["groups"]["encoder_decoder/seq2seq_pairs"]["compute_convention"]
    assert conv["k"] == 0.5 and conv["D"].startswith("source + target positions")
    report_out = tmp_path / "report"
    assert (
        report.main(["--csv", str(src), *FAST, "--group", "family", "--out", str(report_out)]) == 0
    )
    assert (
        report_out / "figures" / "encoder_decoder+seq2seq_pairs" / "loss_vs_compute.svg"
    ).is_file()
    md = (report_out / "report.md").read_text()
    assert "Family encoder_decoder/seq2seq_pairs: summary" in md
    assert (
        "| encoder_decoder/seq2seq_pairs | 0.5 | source + target positions of the padded pairs"
        in md
    )
