"""The progress line keeps what a person looks for (bar, percentage, loss, ETA) visible."""

import io
import re

import pytest
from rich.console import Console

from training.monitor import Progress, format_stats

STATS = {"train_loss": 2.91934, "lr": 0.00096, "tokens_per_sec": 22700.0, "mfu": 0.0179}
TITLE = "pre-rmsnorm-rope-gqa2-swiglu b0be79a053152cbf | N=39.0k | 977 steps"


def _render(width: int) -> list[str]:
    buf = io.StringIO()
    console = Console(file=buf, width=width, force_terminal=True, color_system=None)
    progress = Progress("bar", 977, 0, TITLE, console=console)
    progress.update(150, 150 * 1024, STATS)
    progress._bar.refresh()
    progress.close()
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", buf.getvalue()).replace("\r", "\n")
    return [line.rstrip() for line in text.split("\n") if line.strip()]


@pytest.mark.parametrize("width", [80, 150])
def test_bar_percentage_loss_and_eta_fit_the_terminal(width):
    lines = _render(width)
    assert lines[0] == TITLE  # the run's full name once, above the bar
    last = lines[-1]
    assert len(last) <= width
    assert "━" in last and "15%" in last and "loss 2.9193" in last
    assert re.search(r"(\d+:\d\d|-:--)$", last)  # the ETA, last and whole
    if width >= 110:
        assert "mfu 1.8%" in last and "tok/s 22.7k" in last


def test_stats_show_mfu_as_a_percentage():
    assert format_stats(STATS) == "loss 2.9193 | lr 0.00096 | tok/s 22.7k | mfu 1.8%"
    assert format_stats(STATS, narrow=True) == "loss 2.9193"


def test_eta_comes_from_measured_step_times_from_the_first_update():
    """A slow run updates its bar rarely (every log_every steps): the ETA is the mean measured
    time per step times the steps left, not rich's estimate, which wants 30 s of samples."""
    buf = io.StringIO()
    console = Console(file=buf, width=80, force_terminal=True, color_system=None)
    progress = Progress("bar", 100, 0, TITLE, console=console)
    progress.t0 -= 10.0  # 10 s for the first 10 steps
    progress.update(10, 10 * 1024, STATS)
    progress._bar.refresh()
    progress.close()
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", buf.getvalue()).replace("\r", "\n")
    last = [line.rstrip() for line in text.split("\n") if line.strip()][-1]
    assert last.endswith("1:30"), last  # 90 steps left at 1 s each
    assert progress.eta_s(0) is None


def test_sweep_progress_counts_the_whole_plan_and_its_eta_from_the_measured_rate(
    monkeypatch, capsys
):
    """A tuned sweep derives its later stages as it goes: the total is the plan's from the
    first line (no 2/2 then 2/6), and the ETA is the plan's weight left at the rate measured
    so far (here 20 estimated seconds done in 20 s: 40 s for the 40 left)."""
    import time
    from types import SimpleNamespace

    from sweeps import sweep_view
    from sweeps.sweep_records import RunRecord

    first = [SimpleNamespace(run_key=k, est_s=10.0) for k in ("a", "b")]
    later = [SimpleNamespace(run_key=k, est_s=10.0) for k in ("c", "d", "e", "f")]
    records = {}
    monkeypatch.setattr(sweep_view, "children_by_key", lambda *a: dict(records))
    plan = sweep_view.Planned(runs=6, est_s=60.0)
    with sweep_view.SweepProgress("demo", first, "u", "0", "p", 1, 3600, plan) as bar:
        assert bar.eta_s() == pytest.approx(60.0, abs=1)  # the plan's estimate on 1 slot
        bar._start = time.time() - 20.0
        for k in ("a", "b"):
            records[k] = RunRecord(k, "FINISHED", "", "demo", "p", f"run-{k}", 3.0)
        bar.refresh()
        assert bar.eta_s() == pytest.approx(40.0, abs=1)
        bar.add(later)
        assert bar.total_runs == 6 and bar.total_s == 60.0
    lines = [x for x in capsys.readouterr().out.splitlines() if x.startswith("[sweep demo] ")]
    counts = [re.search(r"(\d+)/(\d+) runs done", x).groups() for x in lines if "runs done" in x]
    assert counts[0] == ("0", "6") and all(total == "6" for _, total in counts)
    assert counts[-1] == ("2", "6") and "ETA 40s" in lines[-1]
