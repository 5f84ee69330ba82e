"""Scaling-law forms (analysis/fits/laws/): published values, allocations, recovery, fit.json shape.

Recovery designs are small (20-40 runs) with 0.5% multiplicative noise, like a CPU ladder;
tolerances are about the half-width of the interval the bootstrap reports (exponents a few
percent, scales and R_N* tens of percent), and each interval must cover the truth.
"""

import json
import math

import numpy as np
import pandas as pd
import pytest
from scipy.optimize import minimize_scalar

from analysis.data.synthetic import law_runs as runs
from analysis.data.synthetic import size_token_grid as grid
from analysis.fits import cli as fit_cli
from analysis.fits.laws import LAWS, datablations, kaplan, section

# ---------------------------------------------------------------- published values


def test_datablations_reproduces_the_readme_scaling_law():
    law = LAWS["datablations"]
    theta = law.to_theta(datablations.PUBLISHED)
    got = law.predict(theta, {"N": [6.34e9, 8.67e9], "D": [242e9, 178e9], "U": [25e9, 25e9]})[0]
    assert got == pytest.approx([2.2256440889984477, 2.2269634075087867], rel=1e-12, abs=0)


def test_datablations_reproduces_the_readme_optimal_allocation():
    values = {k: np.array([v]) for k, v in datablations.PUBLISHED.items()}
    N, D = datablations.optimal(values, np.array([1e22]), np.array([25e9]))
    # README: "-> 237336955477.55075 tokens, 9.49347821910203 epochs, 7022364735.879969 parameters"
    assert D[0, 0] == pytest.approx(237336955477.55075, rel=1e-12)
    assert N[0, 0] == pytest.approx(7022364735.879969, rel=1e-12)
    assert D[0, 0] / 25e9 == pytest.approx(9.49347821910203, rel=1e-12)


def kaplan_eq_1_5(N, D, alpha_N=0.076, alpha_D=0.103, N_c=6.4e13, D_c=1.8e13):
    """Kaplan et al. 2020 eq. 1.5 with Table 2's constants, written out independently."""
    return ((N_c / N) ** (alpha_N / alpha_D) + D_c / D) ** alpha_D


def test_kaplan_matches_eq_1_5_at_the_published_constants():
    law = LAWS["kaplan"]
    N = np.array([1e6, 3e7, 1e9, 1.5e9])
    D = np.array([2.2e10, 1e9, 2.2e10, 3e11])
    got = law.predict(law.to_theta(kaplan.PUBLISHED), {"N": N, "D": D})[0]
    want = [kaplan_eq_1_5(n, d) for n, d in zip(N, D)]
    assert got == pytest.approx(want, rel=1e-12)
    # infinite data: L(N) = (N_c / N)^alpha_N, eq. 1.1's form with Table 2's constants
    far = law.predict(law.to_theta(kaplan.PUBLISHED), {"N": [1e8], "D": [1e30]})[0, 0]
    assert far == pytest.approx((6.4e13 / 1e8) ** 0.076, rel=1e-12)


def test_kaplan_overfitting_penalty_of_eq_4_4():
    """Eq. 4.4: D >~ 5e3 N^0.74 keeps delta L = L(N, D) / L(N, inf) - 1 near 0.02."""
    law, theta = LAWS["kaplan"], LAWS["kaplan"].to_theta(kaplan.PUBLISHED)
    N = np.geomspace(1e6, 1e10, 5)
    L = law.predict(theta, {"N": N, "D": 5e3 * N**0.74})[0]
    L_inf = law.predict(theta, {"N": N, "D": np.full(5, 1e40)})[0]
    assert np.all(np.abs(L / L_inf - 1 - 0.02) < 0.005)  # 0.0216-0.0219 at these sizes


def test_overtrain_is_chinchilla_with_one_exponent():
    """Gadre et al.'s form is E + A/N^alpha + B/D^beta with alpha = beta = -b, B = c 6^(b/2)."""
    E, a, b, c = 1.9, 300.0, -0.28, 900.0
    N, D = np.geomspace(1e6, 1e9, 4), np.geomspace(1e8, 1e12, 4)
    got = LAWS["overtrain"].predict(
        LAWS["overtrain"].to_theta(dict(E=E, a=a, b=b, c=c)), {"N": N, "D": D}
    )[0]
    M = D / N
    assert got == pytest.approx(a * N**b + c * 6 ** (b / 2) * (M * N) ** b + E, rel=1e-12)
    chin = LAWS["chinchilla"]
    same = chin.predict(
        chin.to_theta(dict(E=E, A=a, B=c * 6 ** (b / 2), alpha=-b, beta=-b)), {"N": N, "D": D}
    )[0]
    assert got == pytest.approx(same, rel=1e-12)


@pytest.mark.parametrize(
    "name, values",
    [
        ("kaplan", kaplan.PUBLISHED),
        ("overtrain", {"E": 1.9, "a": 300.0, "b": -0.28, "c": 900.0}),
        ("chinchilla", {"E": 1.69, "A": 406.4, "B": 410.7, "alpha": 0.339, "beta": 0.285}),
    ],
)
def test_allocation_is_the_minimum_of_the_loss_at_fixed_compute(name, values):
    law = LAWS[name]
    C = np.array([1e18, 1e21])
    N, D = law.optimal({k: np.array([v]) for k, v in values.items()}, C)
    theta = law.to_theta(values)
    for k, c in enumerate(C):

        def loss(log_n, c=c):
            n = math.exp(log_n)
            return law.predict(theta, {"N": [n], "D": [c / (6 * n)]})[0, 0]

        best = minimize_scalar(loss, bracket=(10, 25), tol=1e-10)
        assert N[0, k] == pytest.approx(math.exp(best.x), rel=1e-4)
        assert N[0, k] * D[0, k] * 6 == pytest.approx(c, rel=1e-12)


# ---------------------------------------------------------------- recovery from synthetic runs

N_GRID, D_GRID = grid(np.geomspace(1e5, 1e8, 6), [2, 5, 20, 80, 300])


def _check(sec: dict, truth: dict, rtol: dict):
    for k, want in truth.items():
        assert sec[k] == pytest.approx(want, rel=rtol[k]), k
        lo, hi = sec["ci95"][k]
        assert lo <= want <= hi, (k, want, lo, hi)
        assert k not in sec["not_identified"], sec["why_not_identified"]


def test_kaplan_recovers_its_parameters():
    truth = kaplan.PUBLISHED
    sec, thetas = section(
        LAWS["kaplan"], runs(LAWS["kaplan"], truth, N_GRID, D_GRID), [1e18], 60, 0
    )
    # exponents to 3%, the scales (exp of a log fitted against the exponent) to 40%
    _check(sec, truth, {"alpha_N": 0.03, "alpha_D": 0.03, "N_c": 0.4, "D_c": 0.4})
    assert sec["law"] == "kaplan" and thetas.shape == (60, 4)


def test_overtrain_recovers_its_parameters():
    truth = {"E": 1.8, "a": 400.0, "b": -0.3, "c": 600.0}
    data = runs(LAWS["overtrain"], truth, N_GRID, D_GRID, seed=1)
    sec, _ = section(LAWS["overtrain"], data, [1e18], 60, 0)
    _check(sec, truth, {"E": 0.05, "a": 0.1, "b": 0.03, "c": 0.1})


def datablations_runs(truth, seed=0):
    """Single-epoch runs at or above compute-optimal data, repeated data (2-32 epochs of U =
    25 N) and runs 3-10x larger than compute-optimal for their U (excess parameters)."""
    sizes = np.geomspace(1e6, 1e8, 5)
    N1, D1 = grid(sizes, [25, 50, 100, 200])
    N2, U2 = grid(sizes, [25])
    N2, U2 = np.repeat(N2, 5), np.repeat(U2, 5)
    D2 = U2 * np.tile([2, 4, 8, 16, 32], len(sizes))
    N3, U3 = grid(sizes, [25 / 3, 2.5])
    N = np.concatenate([N1, N2, N3])
    D = np.concatenate([D1, D2, U3 * 4])
    U = np.concatenate([D1, U2, U3])
    return runs(LAWS["datablations"], truth, N, D, U, seed=seed)


def test_datablations_recovers_its_parameters():
    truth = dict(datablations.PUBLISHED)
    sec, _ = section(LAWS["datablations"], datablations_runs(truth), [1e18], 60, 0)
    _check(
        sec,
        truth,
        {
            "E": 0.05,
            "A": 0.5,
            "B": 0.5,
            "alpha": 0.05,
            "beta": 0.05,
            "R_D_star": 0.25,
            "R_N_star": 0.5,
        },
    )
    assert sec["allocation"][0]["U"] == pytest.approx(datablations_runs(truth)["U"].max())


def test_datablations_without_repeated_runs_flags_R_D_star():
    truth = dict(datablations.PUBLISHED)
    data = datablations_runs(truth)
    sec, _ = section(LAWS["datablations"], data[data["D"] <= data["U"]], [1e18], 20, 0)
    assert "R_D_star" in sec["not_identified"]
    assert "repeats" in sec["why_not_identified"]["R_D_star"]


# ---------------------------------------------------------------- the CLI


def test_fit_cli_writes_the_law_section_and_replicates(tmp_path, capsys):
    data = runs(LAWS["overtrain"], {"E": 1.8, "a": 400.0, "b": -0.3, "c": 600.0}, N_GRID, D_GRID)
    data.to_csv(tmp_path / "runs.csv", index=False)
    out = tmp_path / "fit.json"
    code = fit_cli.main(
        [
            "--csv",
            str(tmp_path / "runs.csv"),
            "--law",
            "overtrain",
            "--bootstrap",
            "20",
            "--out",
            str(out),
        ]
    )
    assert code == 0
    p = json.loads(out.read_text())["parametric"]
    assert p["law"] == "overtrain" and set(p["ci95"]) >= {"E", "a", "b", "c"}
    assert isinstance(p["not_identified"], list)
    reps = (tmp_path / "fit.replicates.csv").read_text().splitlines()
    assert reps[0] == "E,a,b,c" and len(reps) == 21
    assert "overtrain" in capsys.readouterr().out


def test_default_law_keeps_fit_json_and_writes_the_replicates_of_its_intervals(tmp_path):
    """fit.json's default section is approach 3's, named `chinchilla`, and the replicates next
    to it are the ones its intervals come from."""
    data = runs(
        LAWS["chinchilla"],
        {"E": 1.69, "A": 406.4, "B": 410.7, "alpha": 0.339, "beta": 0.285},
        N_GRID,
        D_GRID,
    )
    data.to_csv(tmp_path / "runs.csv", index=False)
    out = tmp_path / "fit.json"
    assert (
        fit_cli.main(["--csv", str(tmp_path / "runs.csv"), "--bootstrap", "20", "--out", str(out)])
        == 0
    )
    p = json.loads(out.read_text())["parametric"]
    assert p["law"] == "chinchilla"
    reps = pd.read_csv(tmp_path / "fit.replicates.csv")
    assert list(reps.columns) == ["E", "A", "B", "alpha", "beta"] and len(reps) == 20
    for k in ("E", "alpha", "beta"):
        assert [float(v) for v in np.percentile(reps[k].dropna(), [2.5, 97.5])] == pytest.approx(
            p["ci95"][k], rel=1e-9
        )


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda d: d.drop(columns="U"), "needs a column 'U'"),
        (lambda d: d.assign(U=d["D"] * 2), "'U' is larger than D"),
    ],
)
def test_fit_cli_bad_datablations_input_exits_2_with_one_line(tmp_path, capsys, edit, message):
    data = edit(datablations_runs(dict(datablations.PUBLISHED)))
    data.to_csv(tmp_path / "runs.csv", index=False)
    code = fit_cli.main(
        [
            "--csv",
            str(tmp_path / "runs.csv"),
            "--law",
            "datablations",
            "--out",
            str(tmp_path / "fit.json"),
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "fit.json").exists()


# ---------------------------------------------------------------- each law's own minimum of runs


def overtraining_design() -> pd.DataFrame:
    """Gadre et al.'s fit set: 4 sizes at 20 tokens per parameter (M = 1 in their multiples of
    Chinchilla's ratio) plus the smallest at 320 (M = 16): 5 runs."""
    N = np.array([2e7, 6e7, 2e8, 6e8, 2e7])
    D = 20 * N
    D[-1] = 320 * N[-1]
    return runs(LAWS["overtrain"], {"E": 1.8, "a": 400.0, "b": -0.3, "c": 600.0}, N, D)


def test_a_four_parameter_law_fits_five_runs_that_approach_3_cannot(tmp_path, capsys):
    overtraining_design().to_csv(tmp_path / "runs.csv", index=False)
    out = tmp_path / "fit.json"
    args = ["--csv", str(tmp_path / "runs.csv"), "--bootstrap", "20", "--out", str(out)]
    assert fit_cli.main([*args, "--law", "overtrain"]) == 0
    result = json.loads(out.read_text())
    assert result["parametric"]["law"] == "overtrain" and result["parametric"]["n_points"] == 5
    # the extrapolation check is approach 3's: it says why it was skipped
    assert "needs at least 6 runs" in result["extrapolation"]["skipped"]
    assert "extrapolation check skipped" in capsys.readouterr().out
    # approach 3 itself still needs six, with the message it always had
    out.unlink()
    assert fit_cli.main(args) == 2
    err = capsys.readouterr().err
    assert (
        "the fit L(N, D) = E + A/N^alpha + B/D^beta has 5 parameters and needs at least 6 runs"
        in err
    )
    # and a 4-parameter law its own five
    data = overtraining_design().iloc[:4]
    data.to_csv(tmp_path / "four.csv", index=False)
    assert (
        fit_cli.main(["--csv", str(tmp_path / "four.csv"), "--law", "overtrain", "--out", str(out)])
        == 2
    )
    err = capsys.readouterr().err
    assert "the overtrain law (E, a, b, c) has 4 parameters and needs at least 5 runs" in err
    assert not out.exists()


def test_resamples_with_fewer_runs_than_parameters_leave_the_law_not_identified(tmp_path):
    """Gadre et al.'s 5-run fit set and a 4-parameter law: a resample of 5 runs from 5 draws at
    least 4 distinct runs with probability (5 S(5,4) 4! + 5!) / 5^5 = 1320 / 3125 = 0.4224
    (S the Stirling number of the second kind), below MIN_CONVERGED: every parameter and the
    allocation are not identified, and the reason says how many resamples had enough runs."""
    from analysis.fits.bootstrap import distinct, resample_counts
    from analysis.fits.identification import MIN_CONVERGED

    csv, out = tmp_path / "runs.csv", tmp_path / "fit.json"
    overtraining_design().to_csv(csv, index=False)
    n_boot = 200
    args = ["--csv", str(csv), "--law", "overtrain", "--bootstrap", str(n_boot), "--out", str(out)]
    assert fit_cli.main(args) == 0
    law = json.loads(out.read_text())["parametric"]
    p_enough = (5 * 10 * math.factorial(4) + math.factorial(5)) / 5**5
    assert p_enough == pytest.approx(0.4224) and p_enough < MIN_CONVERGED
    # the resamples the fit drew, counted independently of the fit
    drawn = resample_counts(5, n_boot, seed=0)
    enough = int(sum(len(set(np.flatnonzero(row))) >= 4 for row in drawn))
    assert enough == int((distinct(drawn) >= 4).sum())
    assert abs(enough / n_boot - p_enough) < 3 * math.sqrt(p_enough * (1 - p_enough) / n_boot)
    assert law["n_boot_converged"] <= enough  # never more than the resamples that can fit
    assert set(law["not_identified"]) >= {"E", "a", "b", "c", "N_opt@4.32e+19"}
    why = law["why_not_identified"]["E"]
    assert f"{enough} of {n_boot} resamples drew at least 4 distinct runs" in why
    # the same law on 12 runs (3 per size at 4 ratios): most resamples hold 4+ runs, identified
    N, D = grid([2e7, 6e7, 2e8], [10, 20, 80, 320])
    wide = runs(LAWS["overtrain"], {"E": 1.8, "a": 400.0, "b": -0.3, "c": 600.0}, N, D)
    result, _ = section(LAWS["overtrain"], wide, [1e20], n_boot=40, seed=0)
    assert result["n_boot_converged"] >= MIN_CONVERGED * result["n_boot"]
    assert not {"E", "a", "b", "c"} & set(result["not_identified"])
