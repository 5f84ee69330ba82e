"""SLURM facts the sweep needs from the cluster: can a request run at all, and what became of a job.

Used by the `hydra/launcher=slurm` launcher (hydra_plugins/scaling_lab_sweeper/slurm_launcher.py)
in the submitting process. Everything here shells out to the SLURM client commands (`sinfo`,
`sbatch --test-only`, `squeue`, `sacct`); nothing needs submitit.

- `check_request`: before anything is submitted, `sbatch --test-only` on the very script the
  launcher would submit. A request no node can satisfy (more CPUs or memory than any node, GPUs
  on a CPU partition) is one line naming the launcher fields and what the nodes have; submitted,
  it would pend forever (`PartitionConfig`) or fail in sbatch with a traceback.
- `record_job` / `active_jobs`: which SLURM job a point was submitted as (a file in its run
  folder, on the shared storage) and whether that job is still queued or running: a rerun of
  the sweep skips such a point instead of submitting it twice.
- `cancel`: `scancel` of the sweep's jobs (Ctrl-C or SIGTERM of the sweep).
- `JobStates`: the state of the jobs of one array, from `squeue` while SLURM holds them and from
  `sacct` (accounting) after. A job neither knows for `state_timeout_s` is reported as lost, so
  the sweep never waits forever (without accounting a cancelled job simply disappears).
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

# Job states after which SLURM runs nothing more for the job (a requeued job is PENDING again).
ENDED = {
    "BOOT_FAIL",
    "CANCELLED",
    "COMPLETED",
    "DEADLINE",
    "FAILED",
    "NODE_FAIL",
    "OUT_OF_MEMORY",
    "PREEMPTED",
    "TIMEOUT",
    "REVOKED",
    "SPECIAL_EXIT",
}
# Stopped from outside (scancel, preemption, the time limit): the run is KILLED, not FAILED, and a
# rerun of the sweep resumes it from its last checkpoint.
STOPPED = {"CANCELLED", "DEADLINE", "PREEMPTED", "TIMEOUT"}


class SlurmError(Exception):
    """A request the cluster cannot run, or a cluster that cannot be asked (one line)."""


class JobLost(Exception):
    """A job that ended without a result: `state` is SLURM's (CANCELLED, TIMEOUT, ...) or
    UNKNOWN when it could not be read; `status` is what its MLflow run should say."""

    def __init__(self, job_id: str, state: str, message: str):
        self.job_id, self.state = job_id, state
        self.status = "FAILED" if state in ENDED - STOPPED else "KILLED"
        super().__init__(message)


def _run(cmd: list[str], timeout: float = 30.0) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def require(command: str) -> None:
    if shutil.which(command) is None:
        raise SlurmError(
            f"hydra/launcher=slurm: `{command}` is not on PATH; submit the sweep from a machine "
            "of the SLURM cluster (a login node)"
        )


def node_summary(partition: str | None) -> str:
    """What the partition's nodes offer, e.g. `cpu: 1 node(s) x 2 CPUs, 19284 MB, no GPUs`."""
    cmd = ["sinfo", "-h", "-o", "%P|%D|%c|%m|%G"] + (["-p", partition] if partition else [])
    out = _run(cmd)
    if out.returncode != 0:
        return f"sinfo failed: {(out.stderr.strip().splitlines() or ['?'])[-1]}"
    parts = []
    for line in out.stdout.split():
        name, nodes, cpus, mem, gres = (line.split("|") + [""] * 5)[:5]
        gpus = "no GPUs" if gres in ("", "(null)") else f"gres {gres}"
        parts.append(f"{name}: {nodes} node(s) x {cpus} CPUs, {mem} MB, {gpus}")
    return "; ".join(parts) or f"no partition {partition!r} (sinfo lists none)"


def check_request(script: str, request: Mapping[str, object]) -> None:
    """`sbatch --test-only` the submission script; raise SlurmError (one line) if it is refused.

    `request` holds the launcher fields to name in the message (cpus_per_task, mem_gb, ...)."""
    require("sbatch")
    try:
        out = subprocess.run(
            ["sbatch", "--test-only"], input=script, capture_output=True, text=True, timeout=60
        )
    except subprocess.TimeoutExpired:
        raise SlurmError("sbatch --test-only: no answer in 60 s (is slurmctld up?)") from None
    if out.returncode == 0:
        return
    lines = [ln.strip() for ln in out.stderr.strip().splitlines() if ln.strip()]
    why = lines[-1] if lines else f"exit code {out.returncode}"
    asked = ", ".join(f"{k}={v}" for k, v in request.items() if v is not None)
    partition = request.get("partition")
    raise SlurmError(
        f"hydra.launcher: no node can run a point as requested ({asked}): {why}; "
        f"the cluster has {node_summary(str(partition) if partition else None)}"
    )


@dataclass
class JobStates:
    """Polls the states of one array's jobs (ids like `12_3`); see the module docstring."""

    array_id: str
    state_timeout_s: float
    unread_since: dict[str, float] | None = None

    def read(self) -> dict[str, str]:
        """{job id: state} of every job SLURM can tell about; squeue wins (it is current)."""
        states: dict[str, str] = {}
        acct = _run(["sacct", "-n", "-X", "-P", "-o", "JobID,State", "-j", self.array_id])
        if acct.returncode == 0:
            for line in acct.stdout.splitlines():  # a requeued job: the last record is current
                job, _, state = line.partition("|")
                if job and state:
                    states[job.strip()] = state.split()[0]  # "CANCELLED by 0" -> CANCELLED
        queue = _run(["squeue", "-h", "-r", "-o", "%i|%T", "-j", self.array_id])
        if queue.returncode == 0:
            for line in queue.stdout.splitlines():
                job, _, state = line.partition("|")
                if job and state:
                    states[job.strip()] = state.strip()
        return states

    def lost(self, job_id: str, states: Mapping[str, str]) -> JobLost | None:
        """The JobLost for a job without a result whose state says it ended, or whose state
        nobody could tell for state_timeout_s; None while it is pending or running."""
        if self.unread_since is None:
            self.unread_since = {}
        state = states.get(job_id)
        if state is None:
            since = self.unread_since.setdefault(job_id, time.monotonic())
            waited = time.monotonic() - since
            if waited < self.state_timeout_s:
                return None
            return JobLost(
                job_id,
                "UNKNOWN",
                f"SLURM job {job_id}: no result and no state for {waited:.0f} s (squeue does not "
                "list it, sacct has no record: is accounting off?); treated as timed out",
            )
        self.unread_since.pop(job_id, None)
        if state not in ENDED:
            return None
        if state in STOPPED:
            how = "stopped by scancel, preemption or its time limit"
        else:
            how = "see its log under the sweep's .submitit folder"
        return JobLost(job_id, state, f"SLURM job {job_id} {state} without a result ({how})")


JOB_FILE = "slurm_job"  # in a point's run folder: the id of the SLURM job it was submitted as
ACTIVE = {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "REQUEUED", "RESIZING", "SUSPENDED"}


def record_job(run_folder: Path, job_id: str) -> None:
    run_folder.mkdir(parents=True, exist_ok=True)
    tmp = run_folder / f".{JOB_FILE}.tmp"
    tmp.write_text(job_id + "\n")
    tmp.replace(run_folder / JOB_FILE)


def recorded_job(run_folder: Path) -> str | None:
    with contextlib.suppress(OSError):
        return (run_folder / JOB_FILE).read_text().strip() or None
    return None


def active_jobs(job_ids: Sequence[str]) -> dict[str, str]:
    """{job id: state} of those of `job_ids` SLURM still queues or runs (one squeue call);
    empty where squeue is missing or fails (nothing is then known to be active)."""
    if not job_ids or shutil.which("squeue") is None:
        return {}
    try:
        out = _run(["squeue", "-h", "-r", "-o", "%i|%T", "-j", ",".join(sorted(set(job_ids)))])
    except subprocess.TimeoutExpired:
        return {}
    states = {}
    for line in out.stdout.splitlines():
        job, _, state = line.partition("|")
        if job.strip() in job_ids and state.strip() in ACTIVE:
            states[job.strip()] = state.strip()
    return states


def cancel(job_ids: Sequence[str]) -> list[str]:
    """scancel the jobs of `job_ids` still queued or running; returns those it cancelled."""
    active = sorted(active_jobs(job_ids))
    if active:
        _run(["scancel", *active])
    return active
