"""One sweep point as a Hydra job: share the machine with the other jobs, then train.

This is the task function `sweeps.run` hands to Hydra; the launcher (joblib processes, submitit
local or SLURM) calls it with the point's composed config. The `sweep` node only configures the
sweep and is removed before training, so it never enters the run key.
"""

from __future__ import annotations

import fcntl
import logging
import multiprocessing
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from training.paths import open_lock

log = logging.getLogger(__name__)
# Set by the sweep in the launching process when GPUs are shared by local jobs.
ENV_GPU_POOL = "SCALING_LAB_GPU_POOL"
ENV_GPU_LOCKS = "SCALING_LAB_GPU_LOCKS"
# submitit's preemption/time-limit signal (SUBMITIT_PREEMPT_SIGNAL, set by the SLURM launcher)
PREEMPT_SIGNAL = os.environ.get("SUBMITIT_PREEMPT_SIGNAL", "USR1")
_held: list[Any] = []  # lock files stay open (and locked) for the life of the worker process


class PointInterrupted(RuntimeError):
    """A SLURM job's run stopped by a signal (scancel, preemption, time limit): the checkpoint
    is saved and the MLflow run KILLED; the message is the summary's reason."""


def training_config(cfg: DictConfig) -> DictConfig:
    """The point's `training.train` config: everything but `sweep` and `hydra`."""
    return OmegaConf.masked_copy(cfg, [k for k in cfg if k not in ("sweep", "hydra")])


def claim_gpu() -> str | None:
    """Pin this process to the GPU of the first free slot of the pool (one slot per concurrent
    job; file locks, so a reused joblib worker keeps its slot and two live workers never hold
    the same one)."""
    if _held:
        return os.environ.get("CUDA_VISIBLE_DEVICES")
    pool = [g for g in os.environ.get(ENV_GPU_POOL, "").split(",") if g]
    lock_dir = os.environ.get(ENV_GPU_LOCKS)
    if not pool or not lock_dir:
        return None
    Path(lock_dir).mkdir(parents=True, exist_ok=True)
    for slot, gpu in enumerate(pool):
        f = open_lock(Path(lock_dir) / f"slot{slot}.lock")  # held until exit
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.close()
            continue
        _held.append(f)
        os.environ["CUDA_VISIBLE_DEVICES"] = gpu  # before torch initialises CUDA here
        return gpu
    raise RuntimeError(f"{ENV_GPU_POOL}={','.join(pool)}: every GPU slot is taken by another job")


def allocated_cpus() -> int:
    """The CPUs this process may run on: its affinity mask (cpusets, SLURM's task/affinity or
    cgroup plugin), capped by SLURM_CPUS_PER_TASK, which holds even where the mask is the whole
    node (TaskPlugin=task/none). os.cpu_count() counts the machine, not the allocation."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cpus = os.cpu_count() or 1
    per_task = os.environ.get("SLURM_CPUS_PER_TASK", "")
    if per_task.isdigit() and int(per_task) > 0:
        cpus = min(cpus, int(per_task))
    return max(1, cpus)


def share_cpu(jobs: int) -> int:
    """K local jobs share the allocation: each gets allocated CPUs // K intra-op threads (and
    as many tokenizer threads). A SLURM job's allocation is its own: K does not apply there.
    Returns the thread count (unchanged, 0, for GPU jobs)."""
    if os.environ.get(ENV_GPU_POOL):
        return 0
    import torch  # ~2 s: `python -m sweeps.run` imports this module before checking its input

    local_jobs = 1 if os.environ.get("SUBMITIT_EXECUTOR") == "slurm" else max(1, jobs)
    threads = max(1, allocated_cpus() // local_jobs)
    torch.set_num_threads(threads)
    os.environ.setdefault("RAYON_NUM_THREADS", str(threads))  # HF tokenizers' thread pool
    return threads


def is_local_worker() -> bool:
    """A process of the joblib launcher's pool (loky), not the sweep itself (sweep.jobs=1 runs
    its points in the sweep's own process)."""
    return multiprocessing.current_process().name.startswith("LokyProcess")


def watch_parent(grace_s: float = 60.0, every_s: float = 1.0) -> None:
    """A local worker stops with its sweep: once the sweep process is gone (kill -9), SIGTERM
    itself (a training run checkpoints and records KILLED, as on a SIGTERM from the sweep), and
    exit after `grace_s` whatever happens. The pool's own workers otherwise idle forever."""
    if any(t.name == "sweep-parent-watch" for t in threading.enumerate()):
        return
    ppid = os.getppid()

    def watch() -> None:
        while os.getppid() == ppid:
            time.sleep(every_s)
        log.warning("the sweep process %d is gone: stopping this worker", ppid)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(grace_s)
        os._exit(128 + signal.SIGTERM)

    threading.Thread(target=watch, name="sweep-parent-watch", daemon=True).start()


def _stop_on_sigterm(signum, frame) -> None:
    raise SystemExit(128 + signum)


def run_point(cfg: DictConfig) -> Any:
    on_slurm = os.environ.get("SUBMITIT_EXECUTOR") == "slurm"
    if on_slurm and threading.current_thread() is threading.main_thread():
        # submitit only logs SIGTERM ("Bypassing signal SIGTERM"): before and after training
        # (which installs its own handlers) a cancelled job exits at once instead of running
        # on until SIGKILL
        signal.signal(signal.SIGTERM, _stop_on_sigterm)
    local_worker = not on_slurm and is_local_worker()
    if local_worker:
        watch_parent()
    claim_gpu()
    threads = share_cpu(int(cfg.sweep.jobs))
    if threads:
        # in a SLURM job's log; locally it would land on the sweep's progress bar
        say = log.info if on_slurm else log.debug
        say("torch threads: %d (%d CPUs allocated)", threads, allocated_cpus())
    if int(os.environ.get("SLURM_NTASKS", "1")) > 1:
        # every SLURM task of a multi-GPU point runs this job: make them one torch.distributed
        # world before the Accelerator is created (hydra#2633)
        import submitit  # multi-task SLURM jobs only

        submitit.helpers.TorchDistributedEnvironment().export()
    from training.train import Interrupted, train  # torch: in the job, not the sweep parent

    train_cfg = training_config(cfg)
    if on_slurm:  # which SLURM job trained (or is training) the run: scancel, sacct, its log
        job = os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID")
        job_id = "_".join(job) if all(job) else os.environ.get("SLURM_JOB_ID")
        OmegaConf.update(train_cfg, "tracking.tags.slurm_job_id", job_id, force_add=True)
    try:
        result = train(train_cfg)
    except Interrupted as e:  # the run saved its checkpoint and is KILLED in MLflow
        if local_worker:  # Ctrl-C or SIGTERM stops the whole sweep: this worker ends
            _exit_worker(e)
        if not on_slurm:
            raise  # the sweep's own process (sweep.jobs=1): Ctrl-C or SIGTERM stops the sweep
        if e.signame == f"SIG{PREEMPT_SIGNAL}":
            _requeue(e, job_id)
        # an Exception, so Hydra returns it as this point's failure (a KeyboardInterrupt would
        # end the job without a result)
        raise PointInterrupted(f"SLURM job {job_id}: {e.reason}") from None
    except Exception:
        # the sweep summary shows one line; the traceback goes to this job's log
        log.exception("point failed")
        raise
    if result.status != "FINISHED":  # e.g. diverged: MLflow already says FAILED with a reason
        raise RuntimeError(f"run {result.run_key}: {result.failure_reason}")
    return result


def _exit_worker(e) -> None:
    """End a pool worker whose run stopped on a signal (checkpoint saved, run KILLED): the pool
    would keep it idle, and the sweep waits for its workers to be gone (sweeps.driver)."""
    log.warning("%s: worker %d exits", e.reason, os.getpid())
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(128 + getattr(signal, e.signame, signal.SIGTERM))


def _requeue(e, job_id: str | None) -> None:
    """Preempted or near the time limit, checkpoint saved: let submitit's own handler for the
    signal (restored when train() returned) requeue this job, which then resumes the run. It
    exits the process; where it cannot requeue (the time limit hit max_num_timeout times) it
    raises, and the point fails with the reason."""
    handler = signal.getsignal(getattr(signal, f"SIG{PREEMPT_SIGNAL}"))
    if not callable(handler):
        return
    log.warning("%s: requeueing the job", e.reason)
    # `scontrol requeue` SIGTERMs this job while submitit exits it: nothing is left to stop
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        handler(getattr(signal, f"SIG{PREEMPT_SIGNAL}"), None)
    except Exception as why:  # submitit's UncompletedJobError("Job not requeued because ...")
        raise PointInterrupted(f"SLURM job {job_id}: {e.reason}; {why}") from None
