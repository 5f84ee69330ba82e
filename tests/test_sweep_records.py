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
