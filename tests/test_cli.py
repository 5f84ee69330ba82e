"""The `scaling-lab` command (`scaling_lab.cli`): its help lists every subcommand, each
subcommand is its module run as `python -m MODULE` (same help, same output), and nothing heavy
is imported before a subcommand runs. The installed script calls `scaling_lab.cli:main`; these
tests run `python -m scaling_lab` and `main()`, which need no reinstall."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from scaling_lab import cli

ROOT = Path(__file__).resolve().parents[1]
USER_COMMANDS = [
    "train", "sweep", "prepare", "report", "fit", "predict",
    "compare", "curves", "tune-check", "ui", "export",
]  # fmt: skip


def scaling_lab(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "scaling_lab", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def python_m(module: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_the_script_is_declared_and_its_help_lists_every_subcommand_in_80_columns():
    project = (ROOT / "pyproject.toml").read_text()  # tomllib: Python 3.11+
    assert '[project.scripts]\nscaling-lab = "scaling_lab.cli:main"\n' in project
    assert '"scaling_lab*"]' in project  # in [tool.setuptools.packages.find]
    out = scaling_lab("--help")
    assert out.returncode == 0 and out.stderr == ""
    listed = [line.split()[0] for line in out.stdout.split("subcommands:\n")[1].splitlines()]
    assert listed == USER_COMMANDS == list(cli.COMMANDS)
    assert all(len(line) <= 80 for line in out.stdout.splitlines())
    for command in cli.COMMANDS.values():  # every module exists (found, not imported)
        assert importlib.util.find_spec(command.module) is not None, command.module


def test_help_imports_nothing_heavy():
    code = (
        "import sys; from scaling_lab.cli import main\n"
        "try: main(['--help'])\n"
        "except SystemExit: pass\n"
        "print(sorted({'torch', 'mlflow', 'hydra', 'pandas', 'omegaconf'} & set(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_an_unknown_subcommand_is_one_error_line():
    out = scaling_lab("trian", "model=llama")
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.strip() == (
        f"error: trian: unknown subcommand; available: {', '.join(USER_COMMANDS)}"
    )


@pytest.mark.parametrize("name", ["prepare", "report", "fit", "predict", "compare", "ui"])
def test_a_subcommands_help_is_its_modules(name):
    command = cli.COMMANDS[name]
    ours, theirs = scaling_lab(name, "--help"), python_m(command.module, *command.args, "--help")
    assert ours.returncode == theirs.returncode == 0
    assert ours.stdout == theirs.stdout and ours.stdout.startswith("usage: ")


@pytest.mark.slow
@pytest.mark.parametrize("name", ["train", "sweep", "curves", "tune-check", "export"])
def test_a_subcommands_help_is_its_modules_hydra_and_torch(name):
    command = cli.COMMANDS[name]
    ours, theirs = scaling_lab(name, "--help"), python_m(command.module, *command.args, "--help")
    assert ours.returncode == theirs.returncode == 0
    assert ours.stdout == theirs.stdout and len(ours.stdout.splitlines()) > 3


def test_predict_through_main_writes_what_the_module_writes(tmp_path, monkeypatch):
    """`main()` in this process runs the module as __main__ with the user's arguments."""
    points = tmp_path / "points.csv"
    points.write_text("N,D\n1e5,2e6\n3e5,6e6\n")
    fit = ROOT / "results" / "demo" / "fit.json"
    monkeypatch.setattr(sys, "argv", ["scaling-lab"])
    with pytest.raises(SystemExit) as done:
        cli.main(
            ["predict", "--fit", str(fit), "--csv", str(points), "--out", str(tmp_path / "a.csv")]
        )
        raise SystemExit(0)  # the module returned without exiting
    assert done.value.code in (0, None)
    out = python_m(
        "analysis.predict",
        "--fit",
        str(fit),
        "--csv",
        str(points),
        "--out",
        str(tmp_path / "b.csv"),
    )
    assert out.returncode == 0, out.stderr
    ours = (tmp_path / "a.csv").read_text()
    assert ours == (tmp_path / "b.csv").read_text() and "loss_pred" in ours.splitlines()[0]


def test_a_hydra_subcommand_passes_its_overrides_through():
    """A bad override reaches Hydra (through training.train's own check): its one error line."""
    ours = scaling_lab("train", "train.nope=1")
    theirs = python_m("training.train", "train.nope=1")
    assert ours.returncode == theirs.returncode == 2
    assert ours.stderr == theirs.stderr and ours.stderr.startswith("error: train.nope")


@pytest.mark.slow
def test_report_runs_from_a_csv(tmp_path):
    out = scaling_lab(
        "report", "--csv", "results/ref_wallclock/runs.csv", "--out", str(tmp_path / "report"),
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert json.loads((tmp_path / "report" / "fit.json").read_text())["ablation"]["n_boot"] > 0
    report = (tmp_path / "report" / "report.md").read_text()
    assert (
        report.startswith("# Scaling-law report: ref_wallclock\n") and "12 finished runs" in report
    )


@pytest.mark.slow
def test_a_sweeps_dry_run_through_the_command_is_the_modules(tmp_path):
    """Hydra's overrides pass through: the same plan as `python -m sweeps.run` prints."""
    import os
    import re

    env = {
        **os.environ,
        "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlruns.db'}",
        "SCALING_LAB_RUNS_DIR": str(tmp_path / "runs"),
    }
    args = ["sweep=tiny", "sweep.dry_run=true", "model=vanilla"]
    outs = [
        subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
        for cmd in (
            [sys.executable, "-m", "scaling_lab", "sweep", *args],
            [sys.executable, "-m", "sweeps.run", *args],
        )
    ]
    assert [o.returncode for o in outs] == [0, 0], outs[0].stderr[-2000:]
    ours, theirs = (re.sub(r"planned in [\d.]+s", "", o.stdout) for o in outs)
    assert ours == theirs and "sweep 'tiny'" in ours
    assert "post-layernorm-sinusoidal-mha-gelu" in ours  # model=vanilla reached the plan
