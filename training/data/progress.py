"""The preparation's progress: MB of text and tokens done, their rates, and an ETA; a bar on a
terminal, plain lines every LINE_EVERY_S seconds in a log (stderr not a terminal: a batch job,
`2> prepare.log`).

The ETA is the bytes left over a smoothed rate: an exponential average of the rate between
updates, weighted by the time each covers (time constant RATE_TAU_S). Units finish in bursts
(each worker's 16 MB at once), so the rate between two updates swings from nearly zero to many
times the mean; weighted by time, a burst moves the average by its bytes / RATE_TAU_S only.
The clock starts with the encoding stage, so the BPE's training does not count as slow
encoding. Tokens copied from a cache of the corpus before an edit count as done but not in
the rate.
"""

from __future__ import annotations

import math
import sys
import threading
import time

from rich.progress import BarColumn, TextColumn
from rich.progress import Progress as RichProgress

LINE_EVERY_S = 30.0  # a plain progress line this often (stderr not a terminal)
RATE_TAU_S = 60.0  # the smoothed rate's time constant


def _clock(seconds: float | None) -> str:
    if seconds is None or not math.isfinite(seconds):
        return "-:--:--"
    s = int(round(seconds))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


class Progress:
    """Progress over `total` bytes of text (None: unknown); silent unless enabled; a bar if
    stderr is a terminal, else plain lines (`plain` forces either). Characters are counted as
    bytes (the same for ASCII text). Thread-safe."""

    def __init__(
        self, total: int | None, enabled: bool = True, plain: bool | None = None, stream=None
    ):
        self.total, self.enabled = total, enabled
        self.stream = stream or sys.stderr
        self.plain = (not self.stream.isatty()) if plain is None else plain
        self.chars = self.tokens = 0
        self.lock, self.t0 = threading.Lock(), time.perf_counter()
        self.what, self.since = "starting", self.t0
        self.encoded_at, self.last, self.rate = None, None, None  # the smoothed rate, bytes/s
        self.bar = self.ticker = None
        self.stop = threading.Event()

    def __enter__(self) -> Progress:
        self.encoded_at = self.last = time.perf_counter()  # until a stage says `encoding`
        if not self.enabled:
            return self
        if self.plain:
            self.ticker = threading.Thread(target=self._tick, daemon=True, name="progress")
            self.ticker.start()
        else:
            self.bar = RichProgress(
                TextColumn("{task.fields[what]}"),
                BarColumn(),
                TextColumn("{task.fields[rates]}"),
                transient=False,
            )
            self.bar.start()
            self.task = self.bar.add_task("prepare", total=self.total, rates="", what="")
        return self

    def stage(self, what: str) -> None:
        """A new stage (`encoding` starts the rate's clock); a plain line says so."""
        with self.lock:
            self.what, self.since = what, time.perf_counter()
            if what == "encoding":
                self.encoded_at = self.last = self.since
            self._show(force=True)

    def note(self, text: str) -> None:
        """One line of its own (above the bar on a terminal)."""
        if self.bar is not None:
            self.bar.console.print(text, markup=False, highlight=False)
        elif self.enabled:
            print(text, file=self.stream, flush=True)

    def advance(self, chars: int, tokens: int, copied: bool = False) -> None:
        """`chars` bytes and `tokens` tokens done (`copied`: from another cache, not encoded)."""
        with self.lock:
            self.chars += chars
            self.tokens += tokens
            now = time.perf_counter()
            if not copied and self.last is not None and now > self.last:
                instant = chars / (now - self.last)
                if self.rate is None:  # the first: the mean since encoding started
                    self.rate = chars / max(now - self.encoded_at, 1e-9)
                else:
                    w = 1 - math.exp(-(now - self.last) / RATE_TAU_S)
                    self.rate += w * (instant - self.rate)
            if self.last is not None:  # the next rate covers the time from here
                self.last = now
            self._show()

    def eta(self) -> float | None:
        """Seconds left: the bytes left over the smoothed rate (None until it is known)."""
        if self.total is None or not self.rate:
            return None
        return max(self.total - self.chars, 0) / self.rate

    def line(self) -> str:
        return f"prepare: {self.what}, {self._numbers()}"

    def _numbers(self) -> str:
        dt = max(time.perf_counter() - self.t0, 1e-9)
        done = f"{self.chars / 1e6:,.0f} MB"
        if self.total:
            done += f" of {self.total / 1e6:,.0f} MB ({100 * self.chars / self.total:.0f}%)"
        rate = f"{self.rate / 1e6:,.2f} MB/s" if self.rate else "rate not known yet"
        return (
            f"{done}, {self.tokens / 1e6:,.1f}M tokens, {rate}, "
            f"elapsed {_clock(dt)}, ETA {_clock(self.eta())}"
        )

    def _show(self, force: bool = False) -> None:
        if self.bar is not None:
            self.bar.update(self.task, completed=self.chars, rates=self._numbers(), what=self.what)
        elif self.enabled and self.plain and force:
            print(self.line(), file=self.stream, flush=True)

    def _tick(self) -> None:
        while not self.stop.wait(LINE_EVERY_S):
            with self.lock:
                self._show(force=True)

    def __exit__(self, *exc) -> None:
        self.stop.set()
        if self.bar is not None:
            self.bar.stop()
        elif self.enabled and self.plain and exc[0] is None:  # an error says so itself
            with self.lock:
                self.what = "done"
                self._show(force=True)
