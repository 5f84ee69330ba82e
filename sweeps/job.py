"""One sweep point as a Hydra job: share the machine with the other jobs, then train.

This is the task function `sweeps.run` hands to Hydra; the launcher (joblib processes, submitit
local or SLURM) calls it with the point's composed config. The `sweep` node only configures the
sweep and is removed before training, so it never enters the run key.
"""

from __future__ import annotations

import fcntl
import logging
import os
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

log = logging.getLogger(__name__)
# Set by the sweep in the launching process when GPUs are shared by local jobs.
ENV_GPU_POOL = "SCALING_LAB_GPU_POOL"
ENV_GPU_LOCKS = "SCALING_LAB_GPU_LOCKS"
_held: list[Any] = []  # lock files stay open (and locked) for the life of the worker process


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
        f = open(Path(lock_dir) / f"slot{slot}.lock", "w")  # noqa: SIM115 - held until exit
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.close()
            continue
        _held.append(f)
        os.environ["CUDA_VISIBLE_DEVICES"] = gpu  # before torch initialises CUDA here
        return gpu
    raise RuntimeError(f"{ENV_GPU_POOL}={','.join(pool)}: every GPU slot is taken by another job")


def share_cpu(jobs: int) -> None:
    """K jobs on one CPU machine: each gets cores // K intra-op threads, not all of them."""
    if os.environ.get(ENV_GPU_POOL):
        return
    import torch

    torch.set_num_threads(max(1, (os.cpu_count() or 1) // max(1, jobs)))


def run_point(cfg: DictConfig) -> Any:
    claim_gpu()
    share_cpu(int(cfg.sweep.jobs))
    if int(os.environ.get("SLURM_NTASKS", "1")) > 1:
        # every SLURM task of a multi-GPU point runs this job: make them one torch.distributed
        # world before the Accelerator is created (hydra#2633)
        import submitit

        submitit.helpers.TorchDistributedEnvironment().export()
    from training.train import train

    try:
        result = train(training_config(cfg))
    except Exception:
        # the sweep summary shows one line; the traceback goes to this job's log
        log.exception("point failed")
        raise
    if result.status != "FINISHED":  # e.g. diverged: MLflow already says FAILED with a reason
        raise RuntimeError(f"run {result.run_key}: {result.failure_reason}")
    return result
