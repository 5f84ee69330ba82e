"""Progress display and throughput accounting for a training run (main process only).

- `Progress`: a rich progress bar (loss, tokens/s, ETA) on a terminal, plain one-line reports
  every `train.log_every` steps otherwise (CI logs, Slurm files), or nothing.
- `measured_peak_flops`: a matmul peak measured once per process, for MFU when
  `train.peak_flops` is not given (so MFU on a laptop CPU means something; it is a practical
  peak, not a datasheet number). `matmul_peak_flops` measures it anew (the benchmarks, each
  repetition).
"""

from __future__ import annotations

import sys
import time
from typing import Literal

import torch
from rich.console import Console
from rich.progress import BarColumn, TaskProgressColumn, TextColumn
from rich.progress import Progress as RichProgress

from models.values import format_duration

_MEASURED_PEAK: dict[str, float] = {}


def matmul_peak_flops(device, dtype, n: int, reps: int = 5) -> float:
    """Best FLOP/s of `reps` n x n x n matmuls in `dtype` on `device` (a practical, not
    datasheet, peak; measured anew on every call).

    The operands come from a private generator: the global RNG (dropout's) is left as seeded,
    so a run trains the same whether or not its process measured the peak before."""
    gen = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(n, n, device=device, dtype=dtype, generator=gen)
    b = torch.randn(n, n, device=device, dtype=dtype, generator=gen)
    best = float("inf")
    for _ in range(reps):
        if device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        (a @ b).sum().item()
        best = min(best, time.perf_counter() - t0)
    return 2 * n**3 / best


def measured_peak_flops(device, dtype=None) -> float:
    """The peak MFU is measured against when `train.peak_flops` is unset: `matmul_peak_flops`
    at n = 4096 on CUDA, 1024 otherwise, in bf16 on CUDA, fp32 otherwise (once per process,
    device and dtype)."""
    dtype = dtype or (torch.bfloat16 if device.type == "cuda" else torch.float32)
    key = f"{device}-{dtype}"
    if key not in _MEASURED_PEAK:
        n = 4096 if device.type == "cuda" else 1024
        _MEASURED_PEAK[key] = matmul_peak_flops(device, dtype, n)
    return _MEASURED_PEAK[key]


def format_si(x: float) -> str:
    """A number for progress lines with an SI prefix (k, M, G) and one decimal: 22.7k, 1.3G
    (cf. `sweeps.plan.format_count`, K/M/B/T for tables)."""
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(x) >= scale:
            return f"{x / scale:.1f}{unit}"
    return f"{x:.0f}"


def format_clock(seconds: float) -> str:
    """An ETA as the bar shows it: 0:42, 12:05, 3:07:40."""
    s = int(round(seconds))
    h, m = divmod(s // 60, 60)
    return f"{h}:{m:02d}:{s % 60:02d}" if h else f"{m}:{s % 60:02d}"


NARROW = 110  # below this many terminal columns the bar shows only bar, %, loss and ETA


def format_stats(stats: dict[str, float], narrow: bool = False) -> str:
    """'loss 2.9193 | lr 0.00096 | tok/s 22.7k | mfu 1.8%': losses to 4 decimals, MFU as a
    percentage; `narrow` keeps the loss alone (what a person watching a run looks for)."""
    parts = []
    for k, v in stats.items():
        if k.endswith("loss"):
            parts.append(f"{'loss' if k == 'train_loss' else k} {v:.4f}")
        elif narrow:
            continue
        elif k == "mfu":
            parts.append(f"mfu {100 * v:.1f}%")
        elif k == "tokens_per_sec":
            parts.append(f"tok/s {format_si(v)}")
        else:
            parts.append(f"{k} {format_si(v) if v >= 1 else f'{v:.3g}'}")
    return " | ".join(parts)


class Progress:
    """One run's progress: a rich bar on a terminal (its full title printed once above it, then
    bar, percentage, loss and ETA, which fit 80 columns; lr, tokens/s and MFU too on wider
    terminals), plain one-line reports otherwise."""

    def __init__(
        self,
        mode: Literal["auto", "bar", "plain", "none"],
        total_steps: int,
        start_step: int,
        title: str,
        console=None,
    ):
        if mode == "auto":
            mode = "bar" if sys.stdout.isatty() else "plain"
        self.mode, self.total, self.start = mode, total_steps, start_step
        self.t0 = time.perf_counter()
        self._bar = None
        if mode == "bar":
            console = console or Console()
            self.narrow = console.width < NARROW
            console.print(title, highlight=False)  # the run's name once, whole
            self._bar = RichProgress(
                BarColumn(bar_width=None if not self.narrow else 24),
                TaskProgressColumn(),
                TextColumn("{task.fields[stats]}"),
                TextColumn("{task.fields[eta]}"),
                console=console,
            )
            self._task = self._bar.add_task(
                title, total=total_steps, completed=start_step, stats="", eta="-:--"
            )
            self._bar.start()
        elif mode == "plain":
            print(title, flush=True)

    def update(self, step: int, tokens: int, stats: dict[str, float]) -> None:
        """`step` optimizer steps done, `tokens` seen; stats: train_loss, lr, tokens_per_sec, ..."""
        if self._bar is not None:
            stats_text = format_stats(stats, self.narrow)
            eta = self.eta_s(step)
            eta_text = "-:--" if eta is None else format_clock(eta)
            self._bar.update(self._task, completed=step, stats=stats_text, eta=eta_text)
        elif self.mode == "plain":
            eta = self.eta_s(step) or 0.0
            print(
                f"step {step}/{self.total} ({100 * step / max(self.total, 1):.0f}%) | tokens "
                f"{format_si(tokens)} | {format_stats(stats)} | eta {format_duration(eta)}",
                flush=True,
            )

    def eta_s(self, step: int) -> float | None:
        """Seconds left at the mean measured time per step since this process started (None
        before its first step): known from the first update, however rarely that comes."""
        done = step - self.start
        if done <= 0:
            return None
        return (time.perf_counter() - self.t0) / done * max(self.total - step, 0)

    def message(self, text: str) -> None:
        if self._bar is not None:
            self._bar.console.print(text)
        elif self.mode != "none":
            print(text, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
