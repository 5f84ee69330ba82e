"""SIGTERM and Ctrl-C during a training run: `Interrupted`, and `Signals`, the handlers that
defer a signal to the loop's next step boundary (where `last.pt` is saved first)."""

from __future__ import annotations

import contextlib
import logging
import signal
import threading

log = logging.getLogger("training.train")


class Interrupted(KeyboardInterrupt):
    """SIGTERM (what SLURM and other schedulers send) or Ctrl-C stopped the run: handled like
    Ctrl-C, i.e. the MLflow run is marked KILLED with `failure_reason` = `reason`. During the
    training loop the signal is deferred to the next step boundary, where `last.pt` is saved
    first (`step` is then that checkpoint's step; None when it came before or after the loop)."""

    def __init__(self, signame: str, step: int | None = None):
        self.signame, self.step = signame, step
        saved = f" at step {step}; checkpoint saved, rerun to resume" if step is not None else ""
        self.reason = f"interrupted by {signame}{saved}"
        super().__init__(self.reason)


class Signals:
    """SIGTERM and SIGINT handlers for one `train()` call (main thread only; the previous
    handlers come back when it returns). Outside `deferred` mode a signal raises `Interrupted`
    at once; inside it (opening the MLflow run, the training loop) the first one is recorded
    for the loop to act on at a step boundary, and a second one raises at once."""

    SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)

    def __init__(self):
        self.received: signal.Signals | None = None
        self.deferred = False

    def _handle(self, signum, frame) -> None:
        sig = signal.Signals(signum)
        if self.deferred and self.received is None:
            self.received = sig
            log.warning("%s received: stopping at the next step with a checkpoint", sig.name)
            return
        raise Interrupted(sig.name)

    def install(self, stack: contextlib.ExitStack) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in self.SIGNALS:
            previous = signal.signal(sig, self._handle)  # None: not set from Python
            stack.callback(signal.signal, sig, signal.SIG_DFL if previous is None else previous)

    @property
    def name(self) -> str | None:
        return self.received.name if self.received is not None else None
