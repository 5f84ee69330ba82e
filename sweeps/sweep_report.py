"""The optional report step of a sweep (`sweep.report`): `python -m analysis.report` on the
sweep's runs after they trained, and the verdict lines of its summary for the closing table.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

from omegaconf import DictConfig

from sweeps import sweep_records
from sweeps.points import PlannedRun
from sweeps.sweep_view import command_lines, fit_width


def answer(report: Path | None) -> tuple[str, ...]:
    """The verdict lines of the report's summary (`analysis.verdicts.summary.answer_lines` of the
    fit.json beside report.html): what an ablation sweep was run for, for the closing
    summary. Empty without a report or an ablation in it."""
    fit_json = None if report is None else report.parent / "fit.json"
    if fit_json is None or not fit_json.is_file():
        return ()
    from analysis.verdicts.summary import answer_lines  # lazy: scipy, only after a report

    try:
        return tuple(answer_lines(json.loads(fit_json.read_text()).get("ablation")))
    except (ValueError, KeyError, TypeError):  # a fit.json of another shape: no answer
        return ()


def arch_labels(runs: Iterable[PlannedRun], block: Callable[[PlannedRun], str]) -> dict[str, str]:
    """{architecture: block name} for the planned runs (`sweeps.names.block`: `vanilla`,
    `llama`), where each architecture is planned under exactly one name and each name covers
    exactly one architecture; a name that would be ambiguous is left out (the report then
    shows that architecture as it is)."""
    names: dict[str, set[str]] = {}
    for run in runs:
        if run.facts is not None and not run.skip:
            names.setdefault(run.facts.arch, set()).add(block(run))
    one = {arch: next(iter(n)) for arch, n in names.items() if len(n) == 1}
    shared = {n for n in one.values() if list(one.values()).count(n) > 1}
    return {arch: n for arch, n in sorted(one.items()) if n not in shared and n != arch}


def report_args(args: list[str], labels: dict[str, str]) -> list[str]:
    """`sweep.report.args`, with `--label ARCH=NAME` appended for every architecture of
    `labels` the user has not labelled, when the report compares architectures (`--compare
    arch`): its tables and figures then name variants as the sweep file and run names do."""
    compares_arch = (
        any(a == "--compare" and b == "arch" for a, b in zip(args, args[1:]))
        or "--compare=arch" in args
    )
    if not compares_arch:
        return list(args)
    given = [b for a, b in zip(args, args[1:]) if a == "--label"]
    given += [a.removeprefix("--label=") for a in args if a.startswith("--label=")]
    labelled = {g.split("=", 1)[0] for g in given}
    extra = [["--label", f"{arch}={name}"] for arch, name in labels.items() if arch not in labelled]
    return [*args, *(a for pair in extra for a in pair)]


def run_report(
    cfg: DictConfig,
    uri: str,
    experiment: str,
    parent_run_id: str,
    labels: dict[str, str] | None = None,
) -> tuple[Path | None, str]:
    """Optional analysis step (`sweep.report`): `python -m analysis.report` on this sweep's
    children (the parent run's), as a subprocess (analysis never imports sweeps); the report
    and its fitted exponents go to the parent run. `labels` ({architecture: block name},
    `arch_labels`) name the variants of a `--compare arch` report. Returns (report.html's path
    when written, the one line saying why it was not: empty when it was or none was asked
    for)."""
    report = cfg.sweep.get("report")
    if not report:
        return None, ""
    cmd = [sys.executable, "-m", "analysis.report"]
    cmd += report_args([str(a) for a in report.get("args") or []], labels or {})
    cmd += ["--tracking-uri", uri, "--experiment", experiment]
    cmd += ["--sweep", parent_run_id, "--out", str(report.out)]
    print(command_lines("report:", cmd), flush=True)
    with tempfile.TemporaryFile("w+") as stderr:  # read after it exits: no pipe to fill
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}  # its lines as it prints them
        with subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=stderr, text=True, env=env
        ) as done:
            for line in done.stdout:  # as it goes, each line within 80 columns
                print(fit_width(line.rstrip("\n")), flush=True)
        stderr.seek(0)
        lines = stderr.read().splitlines()
    errors = [line for line in lines if line.startswith("error: ")]
    for line in lines:  # its warnings; its error goes into ours
        if not line.startswith("error: "):
            print(fit_width(line), file=sys.stderr)
    if done.returncode != 0:
        why = errors[-1].removeprefix("error: ") if errors else "see above"
        return None, f"sweep.report: analysis.report exited with {done.returncode} ({why})"
    out = Path(str(report.out)).resolve()
    sweep_records.log_report(uri, parent_run_id, out)
    return out / "report.html", ""
