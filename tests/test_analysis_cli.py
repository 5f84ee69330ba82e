"""analysis.fit and analysis.report CLIs: outputs, bad input (exit 2, nothing written), reruns."""

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analysis.data.load import InputError
from analysis.data.select import load_selected
from analysis.data.synthetic import isoflop_runs
from analysis.fits import cli as fit_cli
from analysis.fits import fit, isoflop
from analysis.fits.laws.chinchilla import Parametric
from analysis.report import analyse
from analysis.report import cli as report
from analysis.report.compose import build_blocks
from analysis.report.render import render_html
from analysis.report.section import SUMMARY, Context
from analysis.verdicts import summary

LAW = Parametric(E=1.8, A=480.0, B=1200.0, alpha=0.36, beta=0.30)
SMALL = dict(budgets=(1e17, 1e18, 1e19), sizes_per_budget=4, noise=0.005)


@pytest.fixture
def runs_csv(tmp_path):
    path = tmp_path / "runs.csv"
    isoflop_runs(LAW, seed=0, **SMALL).drop(columns=["C"]).to_csv(path, index=False)
    return path


def test_fit_cli_writes_json_with_every_section(runs_csv, tmp_path, capsys):
    out = tmp_path / "fit.json"
    assert fit_cli.main(["--csv", str(runs_csv), "--bootstrap", "50", "--out", str(out)]) == 0
    res = json.loads(out.read_text())
    p = res["parametric"]
    assert p["n_points"] == 12
    for q in ("E", "A", "B", "alpha", "beta", "a", "b"):
        lo, hi = p["ci95"][q]
        assert lo <= p[q] <= hi
    assert res["isoflop"]["n_budgets"] == 3 and len(res["isoflop"]["per_budget"]) == 3
    assert set(res["kaplan"]) >= {"L_N", "L_D", "L_C"}
    assert res["extrapolation"]["n_test"] == 4
    assert all("rel_error" in r for r in res["extrapolation"]["runs"])
    assert "approach 3: L = " in capsys.readouterr().out


def test_fit_all_returns_the_fitted_law_that_fit_json_describes(runs_csv, tmp_path):
    """fit_all hands back approach 3's law as fitted (the report draws it, not a copy rebuilt
    from the JSON) next to the sections, and fit.json is exactly those sections."""
    runs = load_selected(
        argparse.Namespace(csv=[str(runs_csv)], experiment=None, sweep=None, tracking_uri=None)
    ).frame
    fits = fit.fit_all(runs, fit.FitOptions(n_boot=20, seed=0))
    p = fits.parametric
    assert isinstance(fits.law, Parametric) and fits.flops is None
    assert fits.law.n_points == p["n_points"] == 12 and fits.law.objective == p["objective"]
    for q in ("E", "A", "B", "alpha", "beta", "a", "b"):
        assert getattr(fits.law, q) == pytest.approx(p[q], rel=1e-12)
    for row in p["allocation"]:  # the object's allocation is the one the section reports
        n_opt, d_opt = fits.law.optimal(row["C"])
        assert (n_opt, d_opt) == pytest.approx((row["N_opt"], row["D_opt"]), rel=1e-9)
    assert list(fits.as_dict()) == [
        "n_runs",
        "compute",
        "budgets",
        "parametric",
        "isoflop",
        "envelope",
        "kaplan",
        "extrapolation",
    ]
    out = tmp_path / "fit.json"
    assert fit_cli.main(["--csv", str(runs_csv), "--bootstrap", "20", "--out", str(out)]) == 0
    written = json.loads(out.read_text())
    assert written == {
        "source": written["source"],
        "params": "nonembed",
        **json.loads(fit.dumps(fits.as_dict())),
    }


def test_fit_cli_fits_each_group(tmp_path):
    path = tmp_path / "two.csv"
    pd.concat(
        [
            isoflop_runs(LAW, seed=0, variant="a", **SMALL),
            isoflop_runs(LAW, seed=1, variant="b", **SMALL),
        ]
    ).to_csv(path, index=False)
    out = tmp_path / "fit.json"
    args = [
        "--csv",
        str(path),
        "--group",
        "variant",
        "--bootstrap",
        "20",
        "--out",
        str(out),
        "--holdout-above",
        "1e30",
    ]  # no extrapolation refit: keeps the test fast
    assert fit_cli.main(args) == 0
    res = json.loads(out.read_text())
    assert res["group_by"] == "variant" and sorted(res["groups"]) == ["a", "b"]


def _bad(tmp_path, frame):
    path = tmp_path / "bad.csv"
    frame.to_csv(path, index=False)
    return path


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda f: f.drop(columns=["D"]), "two of 'N', 'D', 'C'"),
        (lambda f: f.drop(columns=["loss"]), "missing column"),
        (lambda f: f.assign(N=np.where(f.index == 3, np.nan, f["N"])), "column 'N'"),
        (lambda f: f.assign(loss=np.where(f.index == 0, -1.0, f["loss"])), "column 'loss'"),
        (lambda f: f.head(4), "needs at least 6 runs"),
        (lambda f: f.assign(D=1e9), "same D"),
        (lambda f: f.assign(N=1e7), "same N"),
    ],
)
def test_bad_csv_exits_2_with_one_line_and_writes_nothing(tmp_path, capsys, mutate, message):
    frame = isoflop_runs(LAW, seed=0, **SMALL).drop(columns=["C"])
    path = _bad(tmp_path, mutate(frame))
    out_json, out_dir = tmp_path / "o" / "fit.json", tmp_path / "rep"
    assert fit_cli.main(["--csv", str(path), "--bootstrap", "20", "--out", str(out_json)]) == 2
    assert report.main(["--csv", str(path), "--bootstrap", "20", "--out", str(out_dir)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(message in line for line in err), err
    assert not out_json.exists() and not (tmp_path / "o").exists() and not out_dir.exists()


def test_bad_arguments_exit_2(runs_csv, tmp_path, capsys):
    out = str(tmp_path / "f.json")
    assert fit_cli.main(["--csv", str(runs_csv), "--group", "arch", "--out", out]) == 2
    assert "no column 'arch'" in capsys.readouterr().err
    assert fit_cli.main(["--csv", str(tmp_path / "nope.csv"), "--out", out]) == 2
    assert fit_cli.main(["--csv", str(runs_csv), "--bootstrap", "3", "--out", out]) == 2
    assert fit_cli.main(["--out", out]) == 2
    assert "exactly one source" in capsys.readouterr().err
    assert not (tmp_path / "f.json").exists()


def test_python_dash_m_exit_code(tmp_path):
    bad = _bad(tmp_path, pd.DataFrame({"N": [1.0], "loss": [2.0]}))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "analysis.fit",
            "--csv",
            str(bad),
            "--out",
            str(tmp_path / "x.json"),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: missing column(s)")


def test_report_writes_everything_and_reruns_identically(tmp_path):
    frame = pd.concat(
        [
            isoflop_runs(LAW, seed=0, variant="base", **SMALL),
            isoflop_runs(LAW, seed=1, variant="wide", **SMALL),
        ]
    )
    src = _bad(tmp_path, frame)
    first, second = tmp_path / "r1", tmp_path / "r2"
    args = ["--csv", str(src), "--bootstrap", "30", "--title", "t"]
    assert report.main([*args, "--out", str(first)]) == 0
    figs = sorted(p.name for p in (first / "figures").iterdir())
    for stem in (
        "loss_vs_compute",
        "isoflop",
        "loss_vs_params",
        "contours",
        "multipliers",
        "forest",
    ):
        assert f"{stem}.png" in figs and f"{stem}.svg" in figs
    html = (first / "report.html").read_text()
    assert html.count("<svg") >= 5 and "src=" not in html  # figures inlined: self-contained
    md = (first / "report.md").read_text()
    assert "Approach 3" in md and "compute multiplier" in md and "figures/contours.png" in md
    # Regenerate from the exported runs.csv (no original input): byte-identical outputs.
    assert (
        report.main(
            [
                "--csv",
                str(first / "runs.csv"),
                "--bootstrap",
                "30",
                "--title",
                "t",
                "--out",
                str(second),
            ]
        )
        == 0
    )
    for name in ["report.md", "report.html", "fit.json", "runs.csv"] + [
        f"figures/{f}" for f in figs
    ]:
        assert (first / name).read_bytes() == (second / name).read_bytes(), name


def test_report_leads_with_the_answer(tmp_path):
    """Summary first (a verdict per variant, the law's allocation and held-out error), its figure
    right under it, every later section collapsible in HTML with its own figures inline, and no
    image link in report.md that points at a missing file."""
    import re
    from html.parser import HTMLParser

    frame = pd.concat(
        [
            isoflop_runs(LAW, seed=0, variant="base", **SMALL),
            isoflop_runs(LAW, seed=1, variant="wide", **SMALL),
        ]
    )
    src = _bad(tmp_path, frame)
    out = tmp_path / "r"
    assert (
        report.main(["--csv", str(src), "--bootstrap", "30", "--title", "t", "--out", str(out)])
        == 0
    )
    md = (out / "report.md").read_text()
    headings = re.findall(r"^## (.+)$", md, flags=re.M)
    assert (
        headings[0] == "Summary"
        and headings.index("Approach 3: parametric fit L(N, D) = E + A/N^alpha + B/D^beta") > 0
    )
    summary = md[md.index("## Summary") : md.index(f"## {headings[1]}")]
    assert "| wide |" in summary and re.search(r"- wide(:| is)", summary)  # one sentence each
    assert "held-out error" in summary and "figures/forest.png" in summary
    for link in re.findall(r"\]\((figures/[^)]+)\)", md):
        assert (out / link).is_file(), link
    # Each figure in the section it belongs to.
    approach2 = md[md.index("## Approach 2") : md.index("## Approach 1")]
    assert "figures/isoflop.png" in approach2

    class Outline(HTMLParser):
        def __init__(self):
            super().__init__()
            self.seen: list[str] = []

        def handle_starttag(self, tag, attrs):
            if tag in ("section", "details", "figure", "svg", "img"):
                self.seen.append(tag)

    page = Outline()
    page.feed((out / "report.html").read_text())
    first_details = page.seen.index("details")
    assert page.seen[0] == "section" and "figure" in page.seen[:first_details]  # summary + figure
    assert page.seen.count("details") == len(headings) - 1 and "img" not in page.seen
    assert page.seen.count("figure") == page.seen.count("svg") >= 5  # every figure inline


def test_report_refuses_to_pool_architectures_and_compares_them_by_arch(tmp_path, capsys):
    """A grid over presets has one variant but two architectures: one law for both would be
    wrong, so the report says how to compare them, and --compare arch does."""
    frame = pd.concat(
        [
            isoflop_runs(LAW, seed=0, **SMALL).assign(arch="pre-a"),
            isoflop_runs(LAW, seed=1, **SMALL).assign(
                arch="post-b", run_id=lambda f: "b-" + f["run_id"]
            ),
        ]
    )
    src = _bad(tmp_path, frame)
    out = tmp_path / "r"
    assert report.main(["--csv", str(src), "--bootstrap", "20", "--out", str(out)]) == 2
    assert "mixes architectures ['post-b', 'pre-a']" in capsys.readouterr().err
    assert not out.exists()
    args = ["--csv", str(src), "--bootstrap", "20", "--compare", "arch", "--baseline", "post-b"]
    assert report.main([*args, "--holdout-above", "1e30", "--out", str(out)]) == 0
    ablation = json.loads((out / "fit.json").read_text())["ablation"]
    assert ablation["baseline"] == "post-b" and set(ablation["variants"]) == {"post-b", "pre-a"}


def test_choose_variants_labels_runs_and_decides_whether_a_law_is_fitted():
    """The choice the report makes before fitting: every run gets a text variant (a source
    without the column joins the baseline), the baseline's runs are picked, and a baseline at
    one token budget gets no L(N, D) fit; a wrong --compare or --baseline is one clear error."""
    grid = isoflop_runs(LAW, seed=0, **SMALL)
    runs = pd.concat([grid.assign(variant="rope"), grid.assign(variant=np.nan)], ignore_index=True)
    chosen = analyse.choose_variants(runs, baseline="nope-free")
    assert chosen.variants == ["nope-free", "rope"] and chosen.law_fit
    assert len(chosen.base) == len(grid) and list(chosen.base.index) == list(range(len(grid)))
    assert (chosen.runs["variant"] == "rope").sum() == len(grid)
    one_budget = grid.assign(D=2e9, C=6 * grid["N"] * 2e9)
    two = pd.concat([one_budget.assign(variant="base"), one_budget.assign(variant="b")])
    assert not analyse.choose_variants(two).law_fit
    by_seed = analyse.choose_variants(
        grid.assign(seed=grid.index % 2), compare="seed", baseline="1"
    )
    assert by_seed.variants == ["0", "1"] and (by_seed.base["seed"] == 1).all()
    with pytest.raises(InputError, match="--compare: no column 'arch'"):
        analyse.choose_variants(grid, compare="arch")
    with pytest.raises(InputError, match=r"--baseline: no variant 'x'; variants: \['base'\]"):
        analyse.choose_variants(grid.assign(variant="base"), baseline="x")


def test_missing_sqlite_store_is_an_error_not_a_new_empty_store(tmp_path, capsys):
    missing = tmp_path / "nope.db"
    args = ["--experiment", "x", "--tracking-uri", f"sqlite:///{missing}"]
    assert report.main([*args, "--out", str(tmp_path / "r")]) == 2
    assert f"no MLflow store at {missing}" in capsys.readouterr().err
    assert not missing.exists() and not (tmp_path / "r").exists()


def test_ablation_at_one_token_budget_reports_multipliers_and_matched_losses(tmp_path):
    """Sizes x variants x seeds at a single D: no L(N, D) to fit, but multipliers and the raw
    matched-size comparison are reported."""
    rng = np.random.default_rng(0)
    rows = []
    for variant, worse in (("base", 1.0), ("slow", 1.05)):
        for N in (1e5, 2e5, 4e5, 8e5):
            for seed in (0, 1):
                loss = float(LAW.predict(N, 2e9) * worse * np.exp(0.002 * rng.standard_normal()))
                rows.append(
                    {
                        "run_id": f"{variant}{N:g}{seed}",
                        "variant": variant,
                        "seed": seed,
                        "N": N,
                        "D": 2e9,
                        "loss": loss,
                    }
                )
    src = _bad(tmp_path, pd.DataFrame(rows))
    out = tmp_path / "r"
    assert report.main(["--csv", str(src), "--bootstrap", "20", "--out", str(out)]) == 0
    res = json.loads((out / "fit.json").read_text())
    assert res["parametric"] is None and set(res["ablation"]["variants"]) == {"base", "slow"}
    measured = [m for m in res["ablation"]["variants"]["slow"]["multipliers"] if m["measured"]]
    # 5% worse loss: m < 1, or bounded by 1 where the baseline never ran as little compute
    assert measured and all(
        m["multiplier"] < 1 or (m["method"] == "<" and m["multiplier"] <= 1 + 1e-9)
        for m in measured
    )
    assert [m["verdict"] for m in measured] == ["worse"] * len(measured)
    md = (out / "report.md").read_text()
    assert "Matched cells" in md and "| slow |" in md and "Approach 3" not in md
    assert "At 4 of 4 matched cells slow's loss is higher than base's" in md


# ---------------------------------------------------------------- several sources in one report


def _token_grid(law, C, seed, sweep="grid"):
    """Two fixed sizes x three token budgets (C/4, C, 4C per size): the middle column matches
    IsoFLOP budget C, but no compute group has 3 sizes, so it holds no IsoFLOP profile."""
    rng = np.random.default_rng(seed)
    n_opt = law.optimal(C)[0][0]
    rows = []
    for N in (n_opt / 2, 2 * n_opt):
        for f in (0.25, 1.0, 4.0):
            D = f * C / (6 * N)
            loss = float(law.predict(N, D) * np.exp(0.005 * rng.standard_normal()))
            rows.append(
                {
                    "run_id": f"grid-{len(rows):03d}",
                    "variant": "base",
                    "sweep": sweep,
                    "N": N,
                    "D": D,
                    "C": 6 * N * D,
                    "loss": loss,
                }
            )
    return pd.DataFrame(rows)


def _curves_of(frame):
    return pd.DataFrame(
        [
            {"run_id": r.run_id, "tokens": t, "val_loss": r.loss * (1 + 1e-9 * (r.D - t))}
            for r in frame.itertuples()
            for t in (r.D / 2, r.D)
        ]
    )


def test_report_over_an_isoflop_sweep_and_a_token_grid(tmp_path):
    """Approach 2 uses only the IsoFLOP sweep's profiles (the grid's runs at C = 1e18 do not
    join that budget); approach 3 and the extrapolation check use every run; the exported
    runs.csv and curves.csv regenerate the same report."""
    ladder = isoflop_runs(LAW, seed=0, **SMALL).assign(sweep="iso")
    grid = _token_grid(LAW, 1e18, seed=1)
    paths = {}
    for name, frame in (("ladder", ladder), ("grid", grid)):
        paths[name] = tmp_path / f"{name}.csv"
        frame.to_csv(paths[name], index=False)
        _curves_of(frame).to_csv(tmp_path / f"{name}_curves.csv", index=False)
    out, again = tmp_path / "r", tmp_path / "again"
    common = ["--bootstrap", "30", "--title", "combined"]
    args = [
        "--csv",
        str(paths["ladder"]),
        "--csv",
        str(paths["grid"]),
        "--curves",
        str(tmp_path / "ladder_curves.csv"),
        "--curves",
        str(tmp_path / "grid_curves.csv"),
    ]
    assert report.main([*args, *common, "--out", str(out)]) == 0
    res = json.loads((out / "fit.json").read_text())
    assert res["n_runs"] == 18 and res["parametric"]["n_points"] == 18  # approach 3: all runs
    alone = isoflop.isoflop_report(ladder, n_boot=30, seed=0)  # the IsoFLOP sweep only
    iso = res["isoflop"]
    assert [o["sweep"] for o in iso["per_budget"]] == ["iso"] * 3
    assert [o["n_points"] for o in iso["per_budget"]] == [4, 4, 4]
    assert [o["N_opt"] for o in iso["per_budget"]] == [o["N_opt"] for o in alone["per_budget"]]
    assert (iso["a"], iso["ci95"]["a"]) == (alone["a"], alone["ci95"]["a"])
    ext = res["extrapolation"]  # hold out the 1e19 budget, train on everything below it
    assert (ext["n_train"], ext["n_test"]) == (14, 4)
    assert {r["run_id"] for r in ext["runs"]} == set(ladder["run_id"][ladder["C"] > 5e18])
    md = (out / "report.md").read_text()
    assert f"Sources: {paths['ladder']} (12 runs); {paths['grid']} (6 runs)." in md
    assert "Runs per sweep: iso 12, grid 6." in md
    assert len(pd.read_csv(out / "curves.csv")) == 36
    regen = ["--csv", str(out / "runs.csv"), "--curves", str(out / "curves.csv")]
    assert report.main([*regen, *common, "--out", str(again)]) == 0
    files = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    assert "figures/isoflop.svg" in files and "figures/training_curves.svg" in files
    assert files == sorted(str(p.relative_to(again)) for p in again.rglob("*") if p.is_file())
    for name in files:
        assert (out / name).read_bytes() == (again / name).read_bytes(), name


@pytest.mark.parametrize(
    "ladders",
    [{"iso": (1e17, 1e18, 1e19)}, {"iso-a": (1e17, 1e18, 1e19), "iso-b": (3e17, 1e18, 3e18)}],
    ids=["one-ladder", "two-ladders"],
)
def test_isoflop_figure_names_the_profiles_of_the_table(ladders):
    """The IsoFLOP figure's legend names the profiles approach 2's table lists, each with its
    sweep and budget, in the table's order: also when the token grid, the only other sweep,
    holds no profile."""
    from analysis.report import plots

    frames = [_token_grid(LAW, 1e18, seed=9)]
    for seed, (sweep, budgets) in enumerate(ladders.items()):
        ladder = isoflop_runs(LAW, budgets=budgets, sizes_per_budget=4, noise=0.005, seed=seed)
        frames.append(ladder.assign(sweep=sweep, run_id=sweep + "-" + ladder["run_id"]))
    runs = pd.concat(frames, ignore_index=True)
    fits = fit.fit_all(runs, fit.FitOptions(n_boot=20, seed=0, holdout_threshold=1e30))
    an = analyse.Analysis(
        runs=runs,
        grid_runs=None,
        base=runs,
        curves=None,
        fits=fits,
        law_comparison=[],
        ablation=None,
        tuned=None,
        rule=None,
    )
    ctx = Context(fig_dir=Path("unused"), excluded=pd.DataFrame())
    blocks = build_blocks(an, [], "t", ctx)
    start = blocks.index(("h2", "Approach 2: IsoFLOP profiles"))
    _, header, rows = next(b for b in blocks[start:] if b[0] == "table")
    sweep, budget = header.index("sweep"), header.index("C (6ND)")
    in_table = [f"{row[budget]} ({row[sweep]})" for row in rows]
    assert {row[sweep] for row in rows} == set(ladders)  # every ladder, never the grid
    fig = plots.isoflop_curves(runs, fits.isoflop)
    in_legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    plots.plt.close(fig)
    assert in_legend == [*in_table, "minimum"]


def test_sources_without_sweep_or_run_id_are_kept_apart(tmp_path):
    """Two CSVs without run_id or sweep columns: generated ids stay distinct and each source
    is its own sweep, so the grid's runs at an IsoFLOP budget's C do not join that budget."""
    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    isoflop_runs(LAW, seed=0, **SMALL).drop(columns=["run_id", "variant"]).to_csv(a, index=False)
    _token_grid(LAW, 1e18, seed=1).drop(columns=["run_id", "sweep"]).to_csv(b, index=False)
    ns = argparse.Namespace(csv=[str(a), str(b)], experiment=None, sweep=None, tracking_uri=None)
    loaded = load_selected(ns)
    frame = loaded.frame
    assert loaded.source == f"{a} + {b}" and frame["run_id"].is_unique
    assert list(frame["run_id"][[0, 12]]) == ["csv1-row0", "csv2-row0"]
    assert list(frame.columns[:2]) == ["run_id", "source"]
    assert frame["sweep"].value_counts().to_dict() == {str(a): 12, str(b): 6}
    labels = isoflop.isoflop_groups(frame)
    assert (labels[:12] >= 0).all() and (labels[12:] == -1).all()


def test_duplicate_run_id_or_source_is_a_one_line_error(tmp_path, capsys):
    ladder = isoflop_runs(LAW, seed=0, **SMALL)
    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    ladder.to_csv(a, index=False)
    ladder.iloc[[5]].assign(loss=3.0).to_csv(b, index=False)
    out = tmp_path / "r"
    assert report.main(["--csv", str(a), "--csv", str(b), "--out", str(out)]) == 2
    assert report.main(["--csv", str(a), "--csv", str(a), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and not out.exists()
    assert "run_id 'base-005' appears more than once" in err[0] and str(b) in err[0]
    assert f"--csv {a} is given more than once" in err[1]


def test_csv_and_experiment_cannot_be_mixed(runs_csv, tmp_path, capsys):
    out = tmp_path / "r"
    assert report.main(["--csv", str(runs_csv), "--experiment", "x", "--out", str(out)]) == 2
    assert "exactly one source kind" in capsys.readouterr().err and not out.exists()


def test_fit_cli_can_count_all_parameters(tmp_path, capsys):
    # Loss follows LAW in the total parameter count; the non-embedding count is smaller by an
    # embedding table that grows with width, as in small LMs (Pearce & Song 2024).
    from analysis.data.synthetic import grid_runs

    runs = grid_runs(LAW, sizes=(1e5, 1e8), tokens=(1e7, 1e10), n=60, noise=0.002, seed=3)
    runs = runs.assign(N_total=runs["N"], N=runs["N"] - 300 * runs["N"] ** 0.5).drop(columns="C")
    path, out = tmp_path / "runs.csv", tmp_path / "fit.json"
    runs.to_csv(path, index=False)
    args = ["--csv", str(path), "--bootstrap", "20", "--out", str(out)]
    assert fit_cli.main([*args, "--params", "total"]) == 0
    res = json.loads(out.read_text())
    assert res["params"] == "total" and "skipped" in res["isoflop"]
    assert res["parametric"]["alpha"] == pytest.approx(LAW.alpha, abs=0.03)
    assert res["parametric"]["beta"] == pytest.approx(LAW.beta, abs=0.03)
    assert fit_cli.main(args) == 0  # the same runs counted without embeddings: another law
    assert json.loads(out.read_text())["parametric"]["alpha"] < LAW.alpha - 0.03

    runs.drop(columns="N_total").to_csv(path, index=False)
    assert fit_cli.main([*args, "--params", "total"]) == 2
    assert "'N_total'" in capsys.readouterr().err.strip().splitlines()[-1]


def test_multiplier_figure_draws_an_interval_that_misses_its_estimate():
    """A bootstrap percentile interval of a poorly identified fit may not contain the full-data
    multiplier (the demo sweep produced one); the figure must still be drawn, showing the
    interval as it is."""
    import matplotlib

    matplotlib.use("Agg")
    from analysis.report import plots

    ablation = {
        "baseline": "base",
        "variants": {
            "base": {"multipliers": []},
            "v": {
                "multipliers": [
                    {"C": 1e12, "multiplier": 5.0, "ci95": [0.5, 2.0], "measured": True},
                    {"C": 1e13, "multiplier": 3.0, "ci95": [1.5, 4.0], "measured": False},
                ]
            },
        },
    }
    fig = plots.multipliers(ablation)
    from matplotlib.collections import LineCollection

    (intervals,) = [c for c in fig.axes[0].collections if isinstance(c, LineCollection)]
    assert [tuple(s[:, 1]) for s in intervals.get_segments()] == [(0.5, 2.0), (1.5, 4.0)]


# Final losses of the 2017 block in the demo sweep (lr 2e-3, batch 1024): a plateau at small D
# and loss rising with N at D = 1e6, which L = E + A/N^alpha + B/D^beta cannot express.
PLATEAU = [
    (29316, 2.5e5, 5.879),
    (29316, 5e5, 5.693),
    (29316, 1e6, 4.145),
    (99968, 2.5e5, 5.847),
    (99968, 5e5, 4.201),
    (99968, 1e6, 3.267),
    (303968, 2.5e5, 5.863),
    (303968, 5e5, 4.565),
    (303968, 1e6, 3.700),
]


def test_report_says_when_approach_3_is_not_identified(tmp_path):
    """A plateau near the unigram loss (loss rising with N at the smallest D): whatever finite or
    infinite optimum the fit lands on (A = inf or 4.6e151, alpha 34 or 70 across installs), the
    exponent is implausible, so alpha, A and everything derived from them are not identified,
    in fit.json and in the report, and no allocation is printed as a law."""
    rows = [
        {"run_id": f"r{i}", "arch": "a", "N": n, "D": d, "C": 6 * n * d, "loss": loss}
        for i, (n, d, loss) in enumerate(PLATEAU)
    ]
    src = tmp_path / "runs.csv"
    pd.DataFrame(rows).to_csv(src, index=False)
    out = tmp_path / "r"
    assert report.main(["--csv", str(src), "--bootstrap", "20", "--out", str(out)]) == 0
    fit = json.loads((out / "fit.json").read_text())["parametric"]
    assert {"alpha", "A", "a", "b"} <= set(fit["not_identified"])
    assert "outside the plausible range" in fit["why_not_identified"]["alpha"]
    assert all(
        f"N_opt@{c:.3g}" in fit["not_identified"] for c in [r["C"] for r in fit["allocation"]]
    )
    md = (out / "report.md").read_text()
    assert "Not identified by these runs (approach 3)" in md and "outside the plausible range" in md
    table = md[md.index("| quantity |") : md.index("| C (FLOPs, 6ND)")]
    assert "| alpha | not identified |" in table and "| a | not identified |" in table
    html = (out / "report.html").read_text()
    assert "not identified" in html


def test_e_on_its_bound_is_not_identified_and_fixing_it_is_reported(tmp_path):
    """The reference ladder puts E at ~0 over 1.5 decades: E is 'not identified' with what would
    identify it; --fix E=1.2 fits the rest with E held, reported as fixed (no interval)."""
    src = Path(__file__).parent.parent / "results" / "ref_ladder_v2" / "runs.csv"
    out = tmp_path / "fit.json"
    assert fit_cli.main(["--csv", str(src), "--bootstrap", "20", "--out", str(out)]) == 0
    p = json.loads(out.read_text())["parametric"]
    assert "E" in p["not_identified"] and "--fix E=" in p["why_not_identified"]["E"]
    assert (
        fit_cli.main(["--csv", str(src), "--bootstrap", "20", "--fix", "E=1.2", "--out", str(out)])
        == 0
    )
    p = json.loads(out.read_text())["parametric"]
    assert p["E"] == pytest.approx(1.2) and p["fixed"] == {"E": 1.2} and p["ci95"]["E"] is None
    assert "E" not in p["not_identified"] and p["ci95"]["alpha"] is not None


@pytest.mark.parametrize("bad", ["E", "E=abc", "Q=1", "E=-1", "E=0"])
def test_bad_fix_is_one_line_naming_the_flag(tmp_path, capsys, bad):
    src = Path(__file__).parent.parent / "results" / "ref_ladder_v2" / "runs.csv"
    out = tmp_path / "fit.json"
    assert fit_cli.main(["--csv", str(src), "--fix", bad, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: --fix") and not out.exists()


def test_sizes_by_token_multipliers_grid_with_integer_columns_fits(tmp_path):
    """4 sizes x 8 token multipliers (10M-400M parameters, 0.25x-32x of 20 tokens/parameter),
    N and D written as integers as published tables do: 6 N D overflowed int64 and approach 1
    crashed in numpy's SVD. Any well-formed CSV must give a fit."""
    from analysis.data.synthetic import HOFFMANN

    rng = np.random.default_rng(0)
    rows = [
        {
            "N": int(n),
            "D": int(20 * n * m),
            "loss": float(HOFFMANN.predict(n, 20 * n * m) * np.exp(0.01 * rng.standard_normal())),
        }
        for n in (10e6, 40e6, 100e6, 400e6)
        for m in (0.25, 0.5, 1, 2, 4, 8, 16, 32)
    ]
    src = tmp_path / "grid.csv"
    pd.DataFrame(rows).to_csv(src, index=False)
    out = tmp_path / "fit.json"
    assert fit_cli.main(["--csv", str(src), "--bootstrap", "20", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["envelope"]["a"] == pytest.approx(0.37, abs=0.1)  # a finite frontier law
    assert 0.2 < result["parametric"]["alpha"] < 0.5


def test_compute_exact_fits_in_exact_flops_and_names_the_convention(tmp_path, capsys):
    src = Path(__file__).parent.parent / "results" / "ref_ladder_v2" / "runs.csv"
    runs = pd.read_csv(src)
    out = tmp_path / "fit.json"
    args = ["--csv", str(src), "--bootstrap", "20", "--compute", "exact", "--out", str(out)]
    assert fit_cli.main(args) == 0
    assert "(exact FLOPs)" in capsys.readouterr().out
    result = json.loads(out.read_text())
    p = result["parametric"]
    assert result["compute"] == "exact" and p["compute"] == "exact"
    assert result["budgets"][0] == pytest.approx(runs["C_exact"].max(), rel=1e-2)
    # the allocation spends the budget: f(N_opt) D_opt = C with the fitted f(N) = 6N + c N^q
    f = p["flops_per_token"]
    for row in p["allocation"]:
        spent = (6 * row["N_opt"] + f["c"] * row["N_opt"] ** f["q"]) * row["D_opt"]
        assert spent == pytest.approx(row["C"], rel=1e-6)
    assert "skipped" in result["isoflop"]  # the ladder's budgets are iso in 6ND only
    # without C_exact: one line, nothing written
    src2 = tmp_path / "no_exact.csv"
    runs.drop(columns="C_exact").to_csv(src2, index=False)
    out2 = tmp_path / "fit2.json"
    assert fit_cli.main(["--csv", str(src2), "--compute", "exact", "--out", str(out2)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "C_exact" in err[0] and not out2.exists()


def test_summary_states_the_verdict_at_every_measured_budget_then_at_the_largest():
    """The demo's case: worse at most budgets, cannot tell at the largest. The summary says
    both, the verdict over every measured budget first."""

    def cell(c, m, ci, verdict, measured=True):
        return {
            "C": c,
            "multiplier": m,
            "ci95": ci,
            "verdict": verdict,
            "p_holm": 0.01,
            "measured": measured,
        }

    ablation = {
        "baseline": "llama",
        "n_comparisons": 3,
        "variants": {
            "llama": {"multipliers": []},
            "vanilla": {
                "multipliers": [
                    cell(1e10, 0.00136, [1e-6, 0.04], "worse"),
                    cell(1e11, 0.0492, [0.003, 0.3], "worse"),
                    cell(1e12, 0.227, [0.03, 8.0], "cannot tell"),
                    cell(1e13, 5.0, [0.1, 9e4], None, measured=False),
                ]
            },
        },
    }
    (_, lead), (_, header, rows), (_, sentences) = summary.ablation_summary(ablation)
    assert "every measured budget" in lead
    assert header[:3] == ["variant", "verdicts over the measured budgets", "largest C (6ND)"]
    assert rows == [
        [
            "vanilla",
            "worse at 2 of 3, cannot tell at 1 of 3",
            "1e+12",
            "0.227 [0.03, 8]",
            "0.010",
            "cannot tell",
        ]
    ]
    assert (
        "worse at 2 of 3 (C = 1e+10 to 1e+11; it needs 20-740x llama's compute there)"
        in (sentences[0])
    )
    assert sentences[1].startswith("vanilla: cannot tell from llama at C = 1e+12")


def test_a_sweeps_own_csv_reports_without_baseline_or_tune_flags():
    """--baseline and --tune default from the runs: 'base', else the only value or the llama
    block; a tuned sweep's keys are what its candidates vary within an arm."""
    grid = isoflop_runs(LAW, seed=0, **SMALL)

    def defaults(frame, **given):
        args = argparse.Namespace(baseline=None, compare="variant", tune=None, **given)
        return analyse.fill_defaults(args, frame), args

    notes, args = defaults(grid.assign(variant=np.where(grid.index % 2, "x", analyse.LLAMA)))
    assert args.baseline == analyse.LLAMA and notes == [
        f"--baseline {analyse.LLAMA} (of ['{analyse.LLAMA}', 'x']; pass --baseline to choose)"
    ]
    assert defaults(grid.assign(variant="base"))[1].baseline == "base"
    assert defaults(grid.assign(variant="only"))[1].baseline == "only"
    assert defaults(grid.assign(variant=np.where(grid.index % 2, "x", None)))[1].baseline == "base"
    assert defaults(grid.assign(variant=np.where(grid.index % 2, "x", "y")))[1].baseline == "base"
    tuned = grid.assign(
        variant="base",
        arm=grid.index // 2,
        tune_role="candidate",
        **{"train.lr": grid.index % 2, "train.tokens": grid.index, "train.seed": 0},
    )
    notes, args = defaults(tuned)
    assert args.tune == ["train.lr"] and notes == ["--tune train.lr (the tuned settings)"]
    args = argparse.Namespace(baseline="b", compare="variant", tune=["train.warmup"])
    assert analyse.fill_defaults(args, tuned) == [] and args.tune == ["train.warmup"]


def test_report_html_prints_every_section_though_the_screen_collapses_them(tmp_path):
    """On screen every section after the summary is a closed <details>; printed (how a report
    is shared) each shows: a print stylesheet reveals the details' content and a beforeprint
    handler opens every closed one (restored after printing)."""
    import re

    blocks = [
        ("h1", "t"),
        ("h2", SUMMARY),
        ("p", "the verdict"),
        ("h2", "Approach 3"),
        ("p", "the law"),
        ("h2", "Runs"),
        ("table", ["run"], [["a"]]),
    ]
    page = render_html(blocks, tmp_path, "t")
    assert page.count("<details>") == 2 and "<details open" not in page  # collapsed on screen
    style = page[page.index("<style>") : page.index("</style>")]
    printed = re.search(r"@media print\{(.*)\}", style).group(1)
    assert re.search(r"details::details-content\{[^}]*content-visibility:visible", printed)
    script = page[page.index("<script>") : page.index("</script>")]
    assert "beforeprint" in script and "details:not([open])" in script and "open=true" in script
    assert "afterprint" in script
    assert page.index("<script>") > page.rindex("</details>")  # after the sections it opens


HELP_PROBE = """
import runpy, sys
heavy = ("torch", "scipy", "matplotlib", "seaborn", "mlflow")
for name in sys.argv[1:]:
    sys.argv = [name, "--help"]
    try:
        runpy.run_module(f"analysis.{name}", run_name="__main__")
    except SystemExit as e:
        code = e.code
    print("PROBE", name, code, *[m for m in heavy if m in sys.modules], file=sys.stderr)
"""


def test_every_analysis_help_answers_before_any_heavy_import():
    """`python -m analysis.X --help` parses its arguments before torch, scipy, matplotlib or
    mlflow are imported (each ~1-3 s): the help answers at once."""
    analysis = Path(__file__).resolve().parents[1] / "analysis"
    commands = sorted(
        [p.stem for p in analysis.glob("*.py") if 'if __name__ == "__main__"' in p.read_text()]
        + [p.parent.name for p in analysis.glob("*/__main__.py")]  # a package: analysis.report
    )
    assert {"report", "fit", "predict", "compare_laws", "curves"} <= set(commands)
    proc = subprocess.run(
        [sys.executable, "-c", HELP_PROBE, *commands],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).resolve().parents[1],
    )
    probes = [line.split()[1:] for line in proc.stderr.splitlines() if line.startswith("PROBE")]
    assert [p[0] for p in probes] == commands, proc.stderr[-2000:]
    for name, code, *heavy in probes:
        assert code in ("0", "None") and not heavy, (name, code, heavy)
    assert proc.stdout.count("usage:") == len(commands)
