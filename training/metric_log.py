"""The metrics of one MLflow run, each (key, step) written exactly once, off the training loop.

- `logged_pairs(client, run_id)`: the (key, step) pairs the store already holds for a run. A run
  reopened by a rerun (resumed from its checkpoint, or restarted from step 0 after a kill before
  its first checkpoint) trains steps the killed process may have logged: those pairs are
  skipped, every other one is written, so nothing is doubled and nothing is missing.
- `MetricLog`: `add` queues points (a pair already stored or queued is dropped), `send` hands
  them to a writer thread (or writes them, `background=False`), `flush` hands them over now,
  `commit` returns once everything added is in the store. The trainer flushes before every
  checkpoint and commits before its rename: a checkpoint never records progress whose metrics
  are not stored, so a resume re-logs only what the store lacks.
- `send` hands points over at most once per `interval_s` (the windows in between go in the same
  request, up to MLflow's 1000 metrics): a request costs ~2 ms of Python (the GIL) whatever it
  carries, and each hand-over wakes the writer, so a training step that runs Python pays per
  hand-over, not per point (docs/performance.md, logging cost). `flush`, `commit` and a full
  request hand over at once.
- The writer retries a server that stopped answering for `timeout_s` (re-reading which points
  of a failed batch arrived before sending the rest again), then stops with `TrackingLost`,
  raised on the main thread at its next `add`, `send` or `commit`.

Imported with the training loop (`training.trainer`), which needs mlflow anyway.
"""

from __future__ import annotations

import functools
import importlib.util
import logging
import queue
import threading
import time
from collections.abc import Iterable

import torch
from mlflow.entities import Metric
from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor

from training.tracking import TrackingLost, is_remote, unreachable

MAX_METRICS_PER_BATCH = 1000  # MLflow log_batch limit
QUEUE_BATCHES = 64  # hand-overs in flight before `send` waits for the writer
HAND_OVER_INTERVAL_S = 1.0  # points reach the writer at most this often (flush/commit: at once)
SYSTEM_PREFIX = "system/"  # MLflow's system metrics: samples, not per-step points


def logged_pairs(client, run_id: str) -> set[tuple[str, int]]:
    """Every (metric key, step) the store holds for the run, MLflow's system metrics aside."""
    keys = [k for k in client.get_run(run_id).data.metrics if not k.startswith(SYSTEM_PREFIX)]
    return {(k, m.step) for k in keys for m in client.get_metric_history(run_id, k)}


class MetricLog:
    """Points of one run written once each (module docstring). `client` is the run's client,
    `logged` what the store held when the run was (re)opened; `interval_s` 0 hands each log
    window over as it is sent."""

    def __init__(
        self,
        client,
        run_id: str,
        uri: str,
        logged: Iterable[tuple[str, int]] = (),
        background: bool = True,
        timeout_s: float = 30.0,
        interval_s: float = HAND_OVER_INTERVAL_S,
    ):
        self.run_id, self.uri, self.timeout_s, self.interval_s = run_id, uri, timeout_s, interval_s
        self._client = getattr(client, "inner", client)  # retries are this class's own
        self._seen = set(logged)
        self._pending: list[tuple[str, float, int, int]] = []  # Metric objects: the writer's
        self._handed_at = -float("inf")
        self._unconfirmed = False  # handed to the writer since the last commit
        self._error: BaseException | None = None
        self._queue: queue.Queue | None = None
        self._thread = None
        if background:
            self._queue = queue.Queue(QUEUE_BATCHES)
            self._thread = threading.Thread(target=self._drain, name="metric-log", daemon=True)
            self._thread.start()

    def add(self, step: int, **metrics: float) -> None:
        self.check()
        ts, step = int(time.time() * 1000), int(step)
        for key, value in metrics.items():
            if (key, step) not in self._seen:
                self._seen.add((key, step))
                self._pending.append((key, float(value), ts, step))

    def send(self) -> None:
        """Hand the points added so far to the writer if `interval_s` has passed since the last
        hand-over or they fill a request (without a thread: write them)."""
        self.check()
        if self._queue is None:
            self.flush()
        elif self._pending and (
            len(self._pending) >= MAX_METRICS_PER_BATCH
            or time.monotonic() - self._handed_at >= self.interval_s
        ):
            self._hand_over()

    def flush(self) -> None:
        """Hand the points added so far to the writer now, without waiting for the store (a
        checkpoint is coming: its `commit` then waits less)."""
        self.check()
        if not self._pending:
            return
        if self._queue is None:
            batch, self._pending = self._pending, []
            self._write(batch)
        else:
            self._hand_over()

    def commit(self) -> None:
        """Return once every point added is in the store (or raise why it cannot be)."""
        self.flush()
        if self._unconfirmed:
            done = threading.Event()
            self._queue.put(done)
            done.wait()
            self._unconfirmed = False
        self.check()

    def close(self) -> None:
        """`commit`, then stop the writer."""
        try:
            self.commit()
        finally:
            self.abandon()

    def abandon(self) -> None:
        """Stop the writer without waiting for the store (it stopped answering)."""
        if self._thread is not None:
            self._error = self._error or RuntimeError("metric log closed")
            self._queue.put(None)
            self._thread = None

    def check(self) -> None:
        """Raise, on the calling thread, what stopped the writer."""
        if self._error is not None and self._thread is not None:
            raise self._error

    def _hand_over(self) -> None:
        batch, self._pending = self._pending, []
        self._handed_at, self._unconfirmed = time.monotonic(), True
        self._queue.put(batch)  # waits only when QUEUE_BATCHES hand-overs are unwritten

    def _drain(self) -> None:
        while (item := self._queue.get()) is not None:
            if isinstance(item, threading.Event):
                item.set()
            elif self._error is None:
                try:
                    self._write(item)
                except BaseException as e:  # surfaced on the main thread by `check`
                    self._error = e

    def _write(self, points: list[tuple[str, float, int, int]]) -> None:
        """log_batch in chunks; while the server does not answer, retry for `timeout_s`,
        sending again only the points it does not hold."""
        batch = [Metric(key, value, ts, step) for key, value, ts, step in points]
        first, delay = None, 0.5
        while batch:
            try:
                chunk = batch[:MAX_METRICS_PER_BATCH]
                self._client.log_batch(self.run_id, metrics=chunk)
                del batch[: len(chunk)]
                continue
            except Exception as e:
                if not is_remote(self.uri) or not unreachable(e):
                    raise
                now = time.monotonic()
                first = now if first is None else first
                if now - first + delay > self.timeout_s:
                    raise TrackingLost(self.uri, min(m.step for m in batch)) from None
                time.sleep(delay)
                delay = min(2 * delay, 5.0)
            try:  # a batch that failed may have been stored before its answer was lost
                batch = self._missing(batch)
            except Exception as e:
                if not unreachable(e):
                    raise

    def _missing(self, batch: list) -> list:
        keys = {m.key for m in batch}
        stored = {
            (k, m.step) for k in keys for m in self._client.get_metric_history(self.run_id, k)
        }
        return [m for m in batch if (m.key, m.step) not in stored]


def start_system_metrics(uri: str, run_id: str, resumed: bool):
    """MLflow's system metrics (`system/cpu_utilization_percentage`, memory, disk, network, and
    GPU utilisation and memory where pynvml finds one) for the run, sampled by MLflow's thread
    every `MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL` s (default 10); a resumed run continues
    their steps. Returns the monitor for `stop_system_metrics`."""
    logging.getLogger("mlflow.system_metrics").setLevel(logging.WARNING)  # no INFO per run
    nvidia = torch.cuda.is_available() and torch.version.hip is None  # AMD: MLflow uses pyrsmi
    if nvidia and importlib.util.find_spec("pynvml") is None:
        _warn_no_gpu_metrics()
    monitor = SystemMetricsMonitor(run_id, resume_logging=resumed, tracking_uri=uri)
    monitor.start()
    return monitor


@functools.cache  # once per process, not once per run of a sweep
def _warn_no_gpu_metrics() -> None:
    logging.getLogger("training.train").warning(
        "GPU utilisation and memory are not in the runs' system metrics: MLflow reads them "
        "with nvidia-ml-py (pip install nvidia-ml-py; docs/sweeps.md)"
    )


def stop_system_metrics(monitor, store_lost: bool = False) -> None:
    """Stop the sampler; its last samples are written unless the store stopped answering."""
    if monitor is None:
        return
    if store_lost:
        monitor._shutdown_event.set()  # no `finish()`: it would wait on the lost server
    else:
        monitor.finish()
