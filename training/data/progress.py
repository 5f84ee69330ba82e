"""The preparation progress bar: MB of text and tokens read, their rates, and the ETA."""

from __future__ import annotations

import threading
import time

from rich.progress import BarColumn, TextColumn, TimeRemainingColumn
from rich.progress import Progress as RichProgress


class Progress:
    """A rich progress bar over `total` bytes of text (None: unknown); silent unless enabled.
    Characters are counted as bytes (the same for ASCII text). Thread-safe."""

    def __init__(self, total: int | None, enabled: bool = True):
        self.total, self.enabled = total, enabled
        self.chars = self.tokens = 0
        self.lock, self.t0 = threading.Lock(), time.perf_counter()
        self.bar = None

    def __enter__(self) -> Progress:
        if self.enabled:
            self.bar = RichProgress(
                TextColumn("preparing"),
                BarColumn(),
                TextColumn("{task.fields[rates]}"),
                TimeRemainingColumn(),
                transient=False,
            )
            self.bar.start()
            self.task = self.bar.add_task("prepare", total=self.total, rates="")
        return self

    def advance(self, chars: int, tokens: int) -> None:
        with self.lock:
            self.chars += chars
            self.tokens += tokens
            if self.bar is not None:
                self.bar.update(self.task, completed=self.chars, rates=self.rates())

    def rates(self) -> str:
        dt = max(time.perf_counter() - self.t0, 1e-9)
        return (
            f"{self.chars / 1e6:,.0f} MB, {self.tokens / 1e6:,.1f}M tokens "
            f"({self.chars / 1e6 / dt:,.1f} MB/s, {self.tokens / 1e6 / dt:,.2f}M tokens/s)"
        )

    def __exit__(self, *exc) -> None:
        if self.bar is not None:
            self.bar.stop()
