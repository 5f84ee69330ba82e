"""A local sweep with sweep.jobs=2 stopped from outside: its workers never outlive it.

Real signals to the real CLI: SIGTERM to the sweep process alone stops its workers (each run
saved and KILLED) and marks the parent run KILLED with the reason; kill -9 of the sweep process
alone, which nothing can catch, still ends the workers (they watch their parent).
"""

import os
import signal
import subprocess
import time

import pytest

from sweeps.stopping import pool_workers
from tests.test_sweep_run import env, run_states, runs, sweep_cmd, tiny_sweep  # noqa: F401

# two points long enough to be stopped mid-training
AXES = "  model.size: [1e4, 2e4]\n  train.tokens: [20000000]"


def _start(tmp, e, corpus):
    (tmp / "sweep" / "long.yaml").write_text(tiny_sweep(AXES))
    cmd = sweep_cmd(tmp, corpus, "long", "sweep.jobs=2")
    return subprocess.Popen(
        cmd,
        env=e,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # the test signals the sweep process alone, never its group
    )


def _wait_until_both_train(proc, tmp) -> list[int]:
    deadline = time.time() + 240
    while time.time() < deadline:
        time.sleep(0.5)
        if proc.poll() is not None:
            pytest.fail("sweep ended early: " + proc.communicate()[1][-2000:])
        if not (tmp / "mlruns.db").exists():
            continue
        try:
            training = [k for st, k in run_states(tmp) if st == "RUNNING" and k]
        except Exception:  # tables not created yet
            continue
        workers = pool_workers(proc.pid)
        if len(training) == 2 and len(workers) == 2:
            time.sleep(2)  # both past their first steps
            return workers
    os.killpg(proc.pid, signal.SIGKILL)
    pytest.fail("the two points did not start training")


def _gone(pids, timeout_s: float) -> bool:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        alive = []
        for pid in pids:
            try:
                state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if state not in ("Z", "X"):
                alive.append(pid)
        if not alive:
            return True
        time.sleep(0.5)
    return False


@pytest.mark.slow
def test_sigterm_stops_the_workers_and_marks_the_parent_killed(env):
    tmp, e, corpus = env
    proc = _start(tmp, e, corpus)
    try:
        workers = _wait_until_both_train(proc, tmp)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 128 + signal.SIGTERM, err[-3000:]
    assert "stopped by SIGTERM" in err and "Traceback" not in err, err[-3000:]
    assert _gone(workers, 10)
    df = runs(tmp)
    parent = df[df["tags.sweep_parent"] == "long"].iloc[0]
    assert parent["status"] == "KILLED"
    assert parent["tags.failure_reason"] == "stopped by SIGTERM"
    kids = df[df["tags.run_key"].notna()]
    assert len(kids) == 2 and set(kids["status"]) == {"KILLED"}  # each saved and recorded
    assert all(kids["tags.failure_reason"].str.startswith("interrupted by SIGTERM"))


@pytest.mark.slow
def test_workers_end_when_the_sweep_is_killed_with_sigkill(env):
    tmp, e, corpus = env
    proc = _start(tmp, e, corpus)
    try:
        workers = _wait_until_both_train(proc, tmp)
        proc.kill()  # the sweep process alone: its workers are orphaned
        proc.communicate(timeout=30)
        assert _gone(workers, 90), f"workers {workers} outlived the killed sweep"
    finally:
        for pid in pool_workers(proc.pid):
            os.kill(pid, signal.SIGKILL)
    kids = runs(tmp).dropna(subset=["tags.run_key"])
    assert len(kids) == 2 and set(kids["status"]) == {"KILLED"}  # stopped as on SIGTERM
