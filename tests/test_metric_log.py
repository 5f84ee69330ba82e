"""The metric writer's requests: windows coalesced into one hand-over per interval, at once
when flushed, committed or full, and every point stored once; MLflow's system metrics per run (a real SQLite
store)."""

from __future__ import annotations

import time

import pytest

from benchmarks import logging_overhead
from training import tracking
from training.metric_log import (
    MAX_METRICS_PER_BATCH,
    MetricLog,
    logged_pairs,
    start_system_metrics,
    stop_system_metrics,
)


class Counting:
    """A client that records the size of each `log_batch` request it passes on."""

    def __init__(self, client):
        self.client, self.requests = client, []

    def log_batch(self, run_id, metrics):
        self.requests.append(len(metrics))
        return self.client.log_batch(run_id, metrics=metrics)

    def __getattr__(self, name: str):
        return getattr(self.client, name)


def _run(tmp_path, name: str):
    uri = f"sqlite:///{tmp_path / 'store.db'}"
    client = tracking.client(uri)
    run_id = client.create_run(tracking.ensure_experiment(uri, name)).info.run_id
    return uri, client, run_id


def _wait_for(condition, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "the writer did not write in time"
        time.sleep(0.01)


def _steps(client, run_id: str, key: str) -> list[int]:
    return sorted(m.step for m in client.get_metric_history(run_id, key))


def test_windows_within_the_interval_go_in_one_request_and_a_flush_sends_them_at_once(tmp_path):
    uri, client, run_id = _run(tmp_path, "coalesce")
    counting = Counting(client)
    log = MetricLog(counting, run_id, uri, interval_s=3600.0)
    log.add(10, train_loss=3.0, lr=1e-3)
    log.send()  # the first window is handed over at once
    _wait_for(lambda: counting.requests == [2])
    for step in (20, 30, 40):
        log.add(step, train_loss=3.0, lr=1e-3)
        log.send()
    time.sleep(0.5)
    assert counting.requests == [2]  # held: the last hand-over was under an interval ago
    assert _steps(client, run_id, "train_loss") == [10]
    log.flush()  # hands them over now, without waiting for the store
    _wait_for(lambda: len(counting.requests) == 2)
    assert counting.requests == [2, 6]
    log.commit()  # nothing added since: no request
    assert counting.requests == [2, 6]
    assert _steps(client, run_id, "lr") == [10, 20, 30, 40]
    log.add(50, val_loss=2.0)
    log.close()  # a commit: written at once
    assert counting.requests == [2, 6, 1]
    assert _steps(client, run_id, "val_loss") == [50]


def test_a_full_batch_is_written_without_waiting_for_the_interval(tmp_path):
    uri, client, run_id = _run(tmp_path, "full")
    counting = Counting(client)
    log = MetricLog(counting, run_id, uri, interval_s=3600.0)
    log.add(0, train_loss=1.0)
    log.send()
    _wait_for(lambda: len(counting.requests) == 1)
    for step in range(1, MAX_METRICS_PER_BATCH + 1):
        log.add(step, train_loss=1.0)
        if step % 100 == 0:
            log.send()
    _wait_for(lambda: len(counting.requests) == 2)
    assert counting.requests == [1, MAX_METRICS_PER_BATCH]
    log.close()
    assert _steps(client, run_id, "train_loss") == list(range(MAX_METRICS_PER_BATCH + 1))


def test_without_an_interval_each_window_is_its_own_request(tmp_path):
    uri, client, run_id = _run(tmp_path, "per-window")
    counting = Counting(client)
    log = MetricLog(counting, run_id, uri, interval_s=0.0)
    for step in (10, 20, 30):
        log.add(step, train_loss=3.0)
        log.send()
        _wait_for(lambda n=step // 10: len(counting.requests) == n)
    log.close()
    assert counting.requests == [1, 1, 1]


def test_system_metrics_are_sampled_for_the_run_and_a_resumed_run_continues_their_steps(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL", "0.2")
    uri, client, run_id = _run(tmp_path, "system")
    key = "system/cpu_utilization_percentage"
    counts = []
    for resumed in (False, True):  # the first process, then a rerun that reopens the run
        monitor = start_system_metrics(uri, run_id, resumed)
        time.sleep(2.0)
        stop_system_metrics(monitor)
        counts.append(len(_steps(client, run_id, key)))
    steps = _steps(client, run_id, key)
    assert counts[0] >= 2 and counts[1] - counts[0] >= 2, counts
    assert steps == list(range(len(steps)))  # continued, none doubled
    assert "system/system_memory_usage_megabytes" in client.get_run(run_id).data.metrics
    assert logged_pairs(client, run_id) == set()  # samples, not per-step points to re-log


@pytest.mark.slow
def test_logging_benchmark_against_a_real_server_coalesces_the_writers_requests(capsys):
    """`python -m benchmarks.logging_overhead`, small: 100 steps of 1 ms (~0.1-0.5 s) log 10
    windows; the per-window writer sends 10 requests, the coalesced one at most the first
    window at once, one a second after it, and the rest at the round's closing commit."""
    args = ["--kinds", "sleep", "--step-ms", "1", "--rounds", "2", "--round-steps", "100"]
    args += ["--cost-reps", "1"]
    logging_overhead.main([*args, "--commit-every", "0"])
    rows = {
        cells[1]: cells[2:]
        for line in capsys.readouterr().out.splitlines()
        if (cells := [c.strip() for c in line.strip("|").split("|")])[0] == "sleep"
    }
    assert list(rows) == ["none", "sync", "per-window", "coalesced"]
    requests = {mode: float(cells[-1]) for mode, cells in rows.items()}
    assert (requests["none"], requests["sync"], requests["per-window"]) == (0.0, 10.0, 10.0)
    assert 1.0 <= requests["coalesced"] <= 3.0
    assert all(float(cells[0]) > 0 for cells in rows.values())  # ms per step
