"""Stopping a local sweep from outside: SIGTERM to the sweep stops its pool workers first.

The joblib launcher runs points in a pool of worker processes (loky). A signal to the sweep
process alone (`kill PID`, a process manager, a CI timeout) used to end it and leave the workers
training, and the parent run RUNNING. Here the sweep forwards SIGTERM to its workers (each run
saves its checkpoint and records KILLED, then the worker exits: sweeps.job), waits for them, and
raises `SweepStopped`, which marks the parent run KILLED with the reason. A kill -9 of the sweep
cannot be caught: the workers notice it themselves (sweeps.job.watch_parent).
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

POOL_WORKER = b"popen_loky_posix"  # in the command line of every loky worker process


class SweepStopped(KeyboardInterrupt):
    """SIGTERM stopped the sweep: its parent run is KILLED with `reason`."""

    def __init__(self, reason: str):
        self.reason = reason
        super().__init__(reason)


def pool_workers(parent: int | None = None) -> list[int]:
    """The live loky worker processes among the children of `parent` (default: this one)."""
    parent = os.getpid() if parent is None else parent
    pids = []
    for task in Path(f"/proc/{parent}/task").glob("*/children"):
        with contextlib.suppress(OSError):
            pids += [int(p) for p in task.read_text().split()]
    return [p for p in pids if _is_worker(p)]


def _is_worker(pid: int) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return POOL_WORKER in cmdline and state not in ("Z", "X")  # zombies have ended


def stop_workers(sig: int = signal.SIGTERM, grace_s: float = 120.0) -> list[int]:
    """Send `sig` to every pool worker and wait up to `grace_s` for them to end (each saves
    its checkpoint first); returns those still alive after it."""
    workers = pool_workers()
    for pid in workers:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
    deadline = time.monotonic() + grace_s
    while (alive := [p for p in workers if _is_worker(p)]) and time.monotonic() < deadline:
        time.sleep(0.2)
    return alive


@contextlib.contextmanager
def stop_on_sigterm(grace_s: float = 120.0) -> Iterator[None]:
    """While the sweep runs (main thread only): SIGTERM stops the workers, then raises
    SweepStopped; the handler before it comes back afterwards."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handle(signum, frame) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second one must not cut the wait
        left = stop_workers(signal.SIGTERM, grace_s)
        for pid in left:  # past the grace period: not a checkpoint worth waiting for
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        raise SweepStopped("stopped by SIGTERM")

    previous = signal.signal(signal.SIGTERM, handle)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)
