"""The sweep's outcome on its parent run: the report as artifacts, its exponents as metrics."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from sweeps import sweep_records
from training import tracking

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_a_report_goes_to_the_parent_run_with_its_exponents(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlruns.db'}"
    experiment_id = tracking.ensure_experiment(uri, "sweeps")
    client = tracking.client(uri)
    run_id = client.create_run(experiment_id).info.run_id
    out = tmp_path / "report"
    (out / "figures").mkdir(parents=True)
    shutil.copy(ROOT / "results" / "demo" / "fit.json", out / "fit.json")
    (out / "report.html").write_text("<html></html>")
    (out / "figures" / "loss.png").write_bytes(b"\x89PNG")

    logged = sweep_records.log_report(uri, run_id, out)

    fit = json.loads((out / "fit.json").read_text())
    assert logged["fit.parametric.alpha"] == fit["parametric"]["alpha"]
    run = client.get_run(run_id)
    assert run.data.metrics["fit.parametric.alpha"] == fit["parametric"]["alpha"]
    assert run.data.tags["report"] == str(out / "report.html")
    names = {a.path for a in client.list_artifacts(run_id, "report")}
    assert names == {"report/report.html", "report/fit.json", "report/figures"}
    assert [a.path for a in client.list_artifacts(run_id, "report/figures")] == [
        "report/figures/loss.png"
    ]


def _finished(name: str, loss: float, arm: str = "") -> sweep_records.RunRecord:
    return sweep_records.RunRecord(name, "FINISHED", "", "demo", "p", name, loss, arm)


def test_arms_are_ordered_by_block_then_size_and_tokens_as_numbers():
    names = [
        "vanilla-N102K-D250K",
        "vanilla-N33.9K-D1M",
        "vanilla-N305K-D250K",
        "llama-N1.2M-D20M-seed1",
        "vanilla-N33.9K-D250K",
        "llama-N1.2M-D20M",
        "llama-N999-D250K",
    ]
    records = {n: _finished(n, 3.0) for n in names}
    assert [r.name for r in sweep_records.best_per_arm(records)] == [
        "llama-N999-D250K",
        "llama-N1.2M-D20M",
        "llama-N1.2M-D20M-seed1",
        "vanilla-N33.9K-D250K",
        "vanilla-N33.9K-D1M",
        "vanilla-N102K-D250K",
        "vanilla-N305K-D250K",
    ]


def test_the_closing_summary_gives_the_reports_verdict(tmp_path, capsys):
    from sweeps import sweep_report, sweep_view

    out = tmp_path / "report"
    out.mkdir()
    shutil.copy(ROOT / "results" / "demo" / "fit.json", out / "fit.json")
    ablation = json.loads((out / "fit.json").read_text())["ablation"]
    answer = sweep_report.answer(out / "report.html")
    (variant,) = [v for v in ablation["variants"] if v != ablation["baseline"]]
    assert any(line.startswith(f"{variant} against {ablation['baseline']}") for line in answer)
    arms = [_finished("vanilla-N305K-D250K", 4.1), _finished("vanilla-N102K-D250K", 4.5)]
    closing = sweep_view.Closing(arms, out / "report.html", "python -m sweeps.ui", answer)
    sweep_view.print_summary("demo", [], "sqlite:///x.db", "p", closing)
    printed = " ".join(capsys.readouterr().out.split())
    assert "answer (the report's summary):" in printed
    assert all(" ".join(line.split()) in printed for line in answer)
    assert printed.index("vanilla-N102K-D250K") < printed.index("vanilla-N305K-D250K")
    # no report, or a report without an ablation: no answer to give
    assert (
        sweep_report.answer(None) == ()
        and sweep_report.answer(tmp_path / "none" / "report.html") == ()
    )
