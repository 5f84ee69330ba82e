"""A sweep's waves through the launcher and what became of each point (`Outcome`).

`run_waves` launches each wave of the plan (then each stage a tuned sweep derives) whose
stable run finished, records every point's outcome and closes the MLflow runs a lost job left
RUNNING; a broken local worker pool stops the sweep with `WorkerLost`. `failed_points` and
`exit_if_failed` turn the outcomes into the sweep's status. `sweep` is the driver's `Sweep`
(`sweeps.driver`), the invocation whose settings, names and job overrides are used.
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any

from hydra.core.utils import JobStatus

from sweeps import plan
from sweeps.job import PointInterrupted
from sweeps.order import interleaved
from sweeps.slurm import JobLost
from sweeps.stopping import pool_workers
from sweeps.sweep_view import SweepProgress
from training import ownership, tracking

# (override lists, first job index, on_submit(job ids) or None) -> hydra JobReturn per job
Launch = Callable[[list[list[str]], int, Callable | None], Sequence[Any]]
FAILED_BEFORE = "failed before"  # how a point skipped because its run key FAILED begins


@dataclass(frozen=True)
class Outcome:
    """What happened to a point in this invocation (for the summary table)."""

    run: plan.PlannedRun
    state: str  # finished | done-before | skipped | failed | not-run | stopped (tuning)
    reason: str = ""


@dataclass(frozen=True)
class Parent:
    """The sweep's MLflow parent run."""

    experiment_id: str
    run_id: str


def skipped(run: plan.PlannedRun) -> Outcome:
    return Outcome(run, "done-before" if run.skip.startswith("done:") else "skipped", run.skip)


def run_waves(sweep, runs, outcomes, launch: Launch, more, parent: Parent, whole=None) -> None:
    """Launch each wave's runs whose stable run (if any) finished; record their outcomes."""
    todo = [r for r in runs if not r.skip]
    progress = SweepProgress(
        sweep.spec.name,
        todo,
        sweep.uri,
        parent.experiment_id,
        parent.run_id,
        jobs=sweep.jobs,
        planned=whole,
    )
    job_idx = 0
    with progress:
        for wave in _waves(todo, runs, outcomes, more, progress):
            if sweep.config.interleave:
                wave = interleaved(wave)
            batch = []
            for r in wave:
                stable = r.stable_index
                if stable is not None and outcomes.get(stable, Outcome(r, "?")).state not in (
                    "finished",
                    "done-before",
                ):
                    outcomes[r.index] = Outcome(
                        r, "not-run", f"stable run #{stable} did not finish"
                    )
                    continue
                batch.append(r)
            if not batch:
                continue
            overrides = [sweep.job_overrides(r, parent.run_id) for r in batch]
            try:
                results = launch(overrides, job_idx, lambda ids, b=batch: sweep.record_jobs(b, ids))
            except BrokenProcessPool as e:  # a local worker killed (kill -9, out of memory)
                raise _worker_lost(sweep, parent, todo, batch, outcomes, e) from None
            job_idx += len(batch)
            for r, ret in zip(batch, results):
                outcomes[r.index] = _outcome(r, ret)
                _close_lost_run(sweep.uri, parent.experiment_id, r, ret)
            progress.refresh()


class WorkerLost(RuntimeError):
    """A process of the local worker pool (joblib's loky) ended without a result, killed by a
    signal (kill -9, the kernel's out-of-memory killer) or exiting: the pool is broken (loky
    kills its other workers too), so the sweep stops. `reason` is the one line that says what
    happened, which points did not finish and that a rerun resumes them."""

    def __init__(self, reason: str):
        self.reason = reason
        super().__init__(reason)


def _worker_lost(sweep, parent: Parent, todo, batch, outcomes, error: BaseException) -> WorkerLost:
    """After a worker of the batch died: wait for the pool's other workers to end (loky kills
    them), record the batch's outcomes from the store (a point may have finished first), mark
    the runs left RUNNING KILLED with the reason (the rerun resumes each from its last
    checkpoint) and say it in one line."""
    deadline = time.monotonic() + 30
    while pool_workers() and time.monotonic() < deadline:
        time.sleep(0.1)  # nothing may still write to the runs read below
    how = _how_workers_ended(error)
    why = f"the sweep worker process training it was {how}; rerun the sweep to resume"
    client = tracking.client(sweep.uri)
    stopped, unstarted = [], []
    for r in batch:
        found = tracking.find_run_by_key(client, parent.experiment_id, r.run_key)
        if found is not None and found.info.status == "FINISHED":
            outcomes[r.index] = Outcome(r, "finished")
            continue
        outcomes[r.index] = Outcome(r, "not-run", why)
        if found is None or found.info.status != "RUNNING":
            unstarted.append(r)  # never opened in this invocation (or ended before it)
            continue
        stopped.append(r)
        if ownership.live_claim(client, parent.experiment_id, r.run_key) is None:
            tracking.set_tags(client, found.info.run_id, {"failure_reason": why})
            client.set_terminated(found.info.run_id, "KILLED")
    unstarted += [r for r in todo if r.index not in outcomes]
    names = [sweep.names(r) if sweep.names else r.run_key for r in stopped]
    shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    parts = [f"{len(stopped)} point(s) stopped mid-run ({shown}; runs marked KILLED)"]
    parts = parts if stopped else []
    parts += [f"{len(unstarted)} not started"] if unstarted else []
    return WorkerLost(
        f"sweep {sweep.spec.name}: a worker process was {how}; {', '.join(parts) or 'no point lost'}"
        "; rerun the same command to resume (finished points are skipped)"
    )


def _how_workers_ended(error: BaseException) -> str:
    """`killed by SIGKILL` from loky's "The exit codes of the workers are {SIGKILL(-9)}"."""
    codes = re.search(r"exit codes of the workers are \{([^}]*)\}", str(error))
    if codes is None:
        return "lost"
    signals = re.findall(r"(SIG[A-Z0-9]+)\(", codes.group(1))
    if signals:
        return "killed by " + ", ".join(dict.fromkeys(signals))
    return f"lost (exit code {codes.group(1)})"


def exit_if_failed(name: str, ordered: list[Outcome]) -> None:
    """SystemExit(1) after the summary and the parent's FAILED status if any point failed."""
    failed = failed_points(ordered)
    if not failed:
        return
    before = sum(o.state != "failed" for o in failed)
    if before:
        print(
            f"sweep {name}: {before} point(s) FAILED in an earlier run and were skipped "
            "(sweep.retry_failed=true retries them): the parent run is FAILED",
            file=sys.stderr,
            flush=True,
        )
    raise SystemExit(1)


def _waves(todo, runs, outcomes, more, progress):
    """The plan's waves, then (a tuned sweep) each stage `more(outcomes)` derives from the
    finished ones, until it returns none; its runs join `runs` for the summary."""
    yield from plan.waves(todo)
    while more is not None and (stage := more(outcomes)):
        runs.extend(stage)
        for r in stage:
            if r.skip:
                outcomes[r.index] = skipped(r)
        wave = [r for r in stage if not r.skip]
        progress.add(wave)
        yield wave


def failed_points(outcomes) -> list[Outcome]:
    """The points without a result because their run FAILED: in this invocation, or before
    (skipped, not retried). Any of them makes the sweep FAILED, not FINISHED."""
    return [
        o
        for o in outcomes
        if o.state == "failed" or (o.state == "skipped" and o.reason.startswith(FAILED_BEFORE))
    ]


def _outcome(run: plan.PlannedRun, ret: Any) -> Outcome:
    if ret.status == JobStatus.COMPLETED:
        return Outcome(run, "finished")
    err = ret._return_value  # the exception the job raised
    own = isinstance(err, (PointInterrupted, JobLost))  # messages that say what happened
    line = str(err) if own else f"{type(err).__name__}: {err}"
    line = line.splitlines()[0] if line.strip() else type(err).__name__
    return Outcome(run, "failed", line)


def _close_lost_run(uri: str, experiment_id: str, run: plan.PlannedRun, ret: Any) -> None:
    """A job that ended without a result (sweeps.slurm.JobLost: SIGKILLed, node failure, state
    unreadable) may leave its MLflow run RUNNING: mark it KILLED or FAILED with the reason, so
    the record says what happened (the rerun resumes it from its last checkpoint)."""
    err = getattr(ret, "_return_value", None)
    if not isinstance(err, JobLost):
        return
    client = tracking.client(uri)
    found = tracking.find_run_by_key(client, experiment_id, run.run_key)
    if found is None or found.info.status != "RUNNING":
        return  # never started, or train() already recorded how it ended
    tracking.set_tags(client, found.info.run_id, {"failure_reason": str(err)[:1000]})
    client.set_terminated(found.info.run_id, err.status)
