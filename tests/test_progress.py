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
