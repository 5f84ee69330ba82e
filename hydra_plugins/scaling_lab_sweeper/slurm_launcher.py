"""`hydra/launcher=slurm`: hydra-submitit-launcher's SLURM launcher, made to survive the cluster.

What it changes (see sweeps/slurm.py for the cluster queries):
- before the first submission, `sbatch --test-only` of the same script: a request no node can
  satisfy is one line (SlurmError) instead of a job pending forever;
- each wave waits on its jobs itself instead of `job.results()`: a job that ends without a
  result (scancel, preemption, time limit, node failure) or whose state nobody can read for
  `state_timeout_s` becomes a FAILED JobReturn carrying a `JobLost`, so the other points finish
  and the sweep prints its summary;
- a point on several ranks (`nodes` x `tasks_per_node`, one rank per task) runs its tasks
  with `srun --kill-on-bad-exit=1`: a rank's death ends the whole job, no rank hangs;
- submitit's preemption/timeout signal is SIGUSR1 (SLURM sends it `signal_delay_s` before the
  time limit, and at preemption where `PreemptParameters=send_user_signal`): the run checkpoints
  at its next step and submitit requeues the job, which resumes (sweeps/job.py).
"""

import logging
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra.core.config_store import ConfigStore
from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, JobStatus
from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf, SlurmQueueConf
from hydra_plugins.hydra_submitit_launcher.submitit_launcher import SlurmLauncher
from omegaconf import OmegaConf

from sweeps.slurm import JobLost, JobStates, cancel, check_request, require

log = logging.getLogger(__name__)
PREEMPT_SIGNAL = "USR1"  # training.train handles it like SIGTERM; submitit then requeues
OWN_PARAMS = ("state_timeout_s", "poll_s")  # this launcher's, not sbatch's


@dataclass
class ClusterSlurmQueueConf(SlurmQueueConf):
    """hydra-submitit-launcher's SLURM fields plus how this launcher watches its jobs."""

    _target_: str = "hydra_plugins.scaling_lab_sweeper.slurm_launcher.ClusterSlurmLauncher"
    state_timeout_s: float = 300.0  # a job with no result nobody can see for this long is lost
    poll_s: float = 5.0  # between squeue/sacct queries


# conf/hydra/launcher/slurm.yaml builds on this schema (its defaults list)
ConfigStore.instance().store(
    group="hydra/launcher", name="slurm_schema", node=ClusterSlurmQueueConf, provider="scaling-lab"
)


class ClusterSlurmLauncher(SlurmLauncher):
    def __init__(self, **params: Any) -> None:
        own = {k: params.pop(k) for k in OWN_PARAMS if k in params}
        super().__init__(**params)
        self.state_timeout_s = float(own.get("state_timeout_s", 300))
        self.poll_s = float(own.get("poll_s", 5))
        self._checked = False
        self.on_submit = None  # set by the sweep before each launch: called with the job ids

    def _executor(self):
        """The submitit executor, configured as hydra-submitit-launcher configures it."""
        os.environ["SUBMITIT_PREEMPT_SIGNAL"] = PREEMPT_SIGNAL  # read by the jobs' submitit
        # Lazy: only a SLURM sweep needs submitit, and Hydra imports this module in every app.
        import submitit
        from submitit.slurm.slurm import SlurmJobEnvironment

        SlurmJobEnvironment.USR_SIG = PREEMPT_SIGNAL  # this process already imported submitit
        init_keys = {"submitit_folder", "max_num_timeout"}
        executor = submitit.AutoExecutor(
            cluster="slurm",
            folder=self.params["submitit_folder"],
            slurm_max_num_timeout=self.params.get("max_num_timeout", 0),
        )
        base = set(OmegaConf.structured(BaseQueueConf).keys())
        executor.update_parameters(
            **{
                k if k in base else f"slurm_{k}": v
                for k, v in self.params.items()
                if k not in init_keys
            }
        )
        if int(self.params.get("nodes") or 1) * int(self.params.get("tasks_per_node") or 1) > 1:
            # a point on several ranks: one task that dies (kill -9, OOM, a node lost) ends
            # its srun step, the other ranks with it, instead of leaving them waiting in a
            # collective; the job fails, the sweep reports the point, a rerun resumes it
            executor.update_parameters(slurm_srun_args=["--kill-on-bad-exit=1"])
        return executor

    def check_resources(self) -> None:
        """Raise sweeps.slurm.SlurmError (one line) if no node can run one point as requested."""
        require("sinfo")
        executor = self._executor()
        script = executor._executor._make_submission_file_text("true", "preflight")
        fields = ["partition", "nodes", "tasks_per_node", "cpus_per_task", "mem_gb"]
        fields += ["gpus_per_node", "gres", "constraint", "qos", "account", "timeout_min"]
        check_request(script, {k: self.params.get(k) for k in fields})
        self._checked = True

    def launch(
        self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int
    ) -> Sequence[JobReturn]:
        assert self.config is not None
        if not self._checked:
            self.check_resources()
        executor = self._executor()
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        job_params = []
        for idx, overrides in enumerate(job_overrides, start=initial_job_idx):
            job_params.append(
                (
                    list(overrides),
                    "hydra.sweep.dir",
                    idx,
                    f"job_id_for_{idx}",
                    Singleton.get_state(),
                )
            )
        jobs = executor.map_array(self, *zip(*job_params))
        log.info("submitted SLURM array %s (%d jobs)", jobs[0].job_id.split("_")[0], len(jobs))
        ids = [job.job_id for job in jobs]
        try:
            if self.on_submit is not None:
                self.on_submit(ids)
            return self._wait(jobs, [p[0] for p in job_params])
        except KeyboardInterrupt:  # Ctrl-C or SIGTERM of the sweep: its jobs go with it
            cancelled = cancel(ids)
            what = " ".join(cancelled) if cancelled else "none was still queued or running"
            print(f"cancelled the sweep's SLURM jobs: {what}", file=sys.stderr, flush=True)
            raise

    def _wait(self, jobs: list, overrides: list[list[str]]) -> list[JobReturn]:
        """Every job's JobReturn: its own when it wrote one, else FAILED with a JobLost."""
        states = JobStates(jobs[0].job_id.split("_")[0], self.state_timeout_s)
        returns: dict[int, JobReturn] = {}
        while len(returns) < len(jobs):
            current = states.read()  # before looking for results: a job's result precedes its end
            for i, job in enumerate(jobs):
                if i in returns:
                    continue
                # rank 0's result (a job of several tasks names its own file by no task)
                if job.task(0).paths.result_pickle.exists():
                    returns[i] = self._result(job, overrides[i])
                    continue
                lost = states.lost(job.job_id, current)
                if lost is not None:
                    log.warning("%s", lost)
                    returns[i] = _failed(overrides[i], lost)
            if len(returns) < len(jobs):
                time.sleep(self.poll_s)
        return [returns[i] for i in range(len(jobs))]

    @staticmethod
    def _result(job, overrides: list[str]) -> JobReturn:
        """Task 0's JobReturn (rank 0 records the run; on one task, the job's own): `results()`
        of a job of several tasks would also wait for those a dead rank never wrote."""
        try:
            return job.task(0).results()[0]
        except Exception as e:  # submitit's FailedJobError/UncompletedJobError: a long log
            first = (str(e).strip().splitlines() or [type(e).__name__])[0]
            return _failed(
                overrides, JobLost(job.job_id, "FAILED", f"SLURM job {job.job_id}: {first}")
            )


def _failed(overrides: list[str], error: Exception) -> JobReturn:
    ret = JobReturn(overrides=overrides, status=JobStatus.FAILED)
    ret._return_value = error
    return ret
