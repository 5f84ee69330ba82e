"""The main job's console (`python -m sweeps.run`, the demo): every line within 80 columns when
the output is a log (not a terminal), and the dtype probe of each run in its MLflow tag and the
debug log, not on the console. The line-producing functions are tested here, not a 25-minute
demo; the lines below are the demo's own (its report command, its report's longest lines)."""

from __future__ import annotations

import logging
import shlex
from pathlib import Path

import pytest
from train_helpers import compose, runs_df

from sweeps import sweep_records, sweep_report, sweep_view

ROOT = Path(__file__).resolve().parents[1]
DEMO_REPORT_CMD = [
    "/work/main/.venv/bin/python", "-m", "analysis.report", "--compare", "arch",
    "--baseline", "pre-rmsnorm-rope-gqa2-swiglu", "--tune", "train.lr", "--tune", "train.warmup",
    "--tracking-uri", "sqlite:////work/runs-demo/mlruns.db", "--experiment", "scaling-lab",
    "--sweep", "ef3f1282bb3e4efa8ba658caaa9fb6bd", "--out", "outputs/demo/2026-12-05_07-37-00",
]  # fmt: skip
DEMO_REPORT_LINES = [  # analysis.report's stdout, which the sweep passes on
    "approach 3: L = 1.041 (not identified) + 1.926e+04 [11.47, 9.247e+62] / N^0.9872 [0.2892, "
    "12.81] + 225.5 [41.54, 3.816e+05] / D^0.3807 [0.2087, 1.017]",
    "  C = 1.83e+12 (6ND): N_opt = 8.14e+04 (not identified), D_opt = 3.75e+06 (not "
    "identified), D/N = 46 (not identified)",
    "wrote outputs/demo/2026-12-05_07-37-00/report.md, report.html, fit.json, runs.csv, figures/",
    "short line",
]


@pytest.fixture
def log_output(monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)  # pytest's capture is not a terminal


def test_the_report_command_fits_80_columns_and_still_runs_as_one_command(log_output):
    text = sweep_view.command_lines("report:", DEMO_REPORT_CMD)
    lines = text.splitlines()
    assert len(lines) > 1 and all(len(line) <= 80 for line in lines)
    assert lines[0].startswith("report: ") and all(line.endswith(" \\") for line in lines[:-1])
    # what a shell reads when the lines are pasted: the same command, word for word
    assert shlex.split(text.removeprefix("report:").replace("\\\n", " ")) == DEMO_REPORT_CMD


def test_the_reports_lines_are_wrapped_not_cut(log_output):
    for line in DEMO_REPORT_LINES:
        wrapped = sweep_view.fit_width(line).splitlines()
        assert all(len(w) <= 80 for w in wrapped)
        assert " ".join(" ".join(wrapped).split()) == " ".join(line.split())  # nothing lost
        indent = len(line) - len(line.lstrip())
        assert all(w.startswith(" " * (indent + 4)) for w in wrapped[1:])  # continued deeper
    assert sweep_view.fit_width("short line") == "short line"


def test_the_summary_fits_80_columns(tmp_path, capsys, log_output):
    out = tmp_path / "report"
    out.mkdir()
    (out / "fit.json").write_text((ROOT / "results" / "demo" / "fit.json").read_text())
    answer = sweep_report.answer(out / "report.html")
    assert answer and max(map(len, answer)) > 80  # the demo's verdicts, longer than a line
    name = "vanilla-N304K-D250K-lr0.001-wu0.02-finalist-seed1"
    arms = [sweep_records.RunRecord(name, "FINISHED", "", "demo", "p", name, 4.1, "")]
    closing = sweep_view.Closing(arms, out / "report.html", "scaling-lab ui", answer)
    parent = "ef3f1282bb3e4efa8ba658caaa9fb6bd"
    sweep_view.print_summary("demo", [], "sqlite:////work/runs-demo/mlruns.db", parent, closing)
    printed = capsys.readouterr().out
    assert printed.count("\n") > 8 and max(map(len, printed.splitlines())) <= 80
    assert parent in printed and "sqlite:////work/runs-demo/mlruns.db" in printed
    words = " ".join(printed.split())
    assert all(" ".join(line.split()) in words for line in answer)


def test_the_tuning_warning_fits_80_columns():
    warning = (
        "warning: 2 of 4 tuned arms rank their candidates fewer than 50 steps after the longest "
        "warmup (fewest: arm 7300111c5a4b6912, 12 steps): lrs compared this early favour the "
        "highest (short-horizon bias); later sweep.tune_halving.rungs, longer budgets or "
        "tune_halving: false choose better"
    )
    assert max(map(len, sweep_view.fit_width(warning).splitlines())) <= 80


@pytest.mark.slow
def test_the_dtype_probe_goes_to_the_runs_tag_and_the_debug_log(lab, caplog):
    from training.train import train

    with caplog.at_level(logging.DEBUG, logger="training.train"):
        result = train(compose(*lab))
    assert result.status == "FINISHED"
    probe = [r for r in caplog.records if "computed in:" in r.getMessage()]
    assert len(probe) == 1 and probe[0].levelno == logging.DEBUG  # INFO reaches the console
    tag = runs_df(lab).iloc[0]["tags.dtypes"]
    assert "attn.proj=float32>float32" in tag and probe[0].getMessage().endswith(tag)
