"""`hydra/sweeper=plan`: expand `cfg.sweep` into a plan and hand its points to the launcher.

The sweeper is deliberately thin: it gives `sweeps.driver.drive` a `compose` (the exact config
a job will see, through Hydra's own config loader) and a `launch` (the selected launcher:
joblib processes, submitit local or SLURM). Everything else lives in `sweeps.driver`.
"""

import logging
import signal
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra.core.config_store import ConfigStore
from hydra.core.plugins import Plugins
from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, open_dict

from sweeps.slurm import SlurmError
from sweeps.stopping import SweepStopped
from training.cli import environment_error
from training.config import ConfigError


@dataclass
class PlanSweeperConf:
    _target_: str = "hydra_plugins.scaling_lab_sweeper.plan_sweeper.PlanSweeper"


ConfigStore.instance().store(
    group="hydra/sweeper", name="plan", node=PlanSweeperConf, provider="scaling-lab"
)


class PlanSweeper(Sweeper):
    def __init__(self) -> None:
        self.hydra_context: HydraContext | None = None
        self.config: DictConfig | None = None
        self.launcher = None

    def setup(
        self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig
    ) -> None:
        self.hydra_context, self.config = hydra_context, config
        from sweeps.driver import sweep_config  # lazy: see sweep()
        from sweeps.errors import PlanError

        try:  # the sweep section's one check, before any launch
            jobs = sweep_config(config).jobs
        except PlanError as e:  # one line, as in sweep() below
            print(f"error: {e}", file=sys.stderr)
            sys.exit(2)
        # the sweep prints one line per finished point: not the launcher's override list per
        # job, its settings line and sweep folder
        logging.getLogger("hydra_plugins.hydra_joblib_launcher").setLevel(logging.WARNING)
        with open_dict(config):
            launcher = config.hydra.launcher
            if "n_jobs" in launcher:  # joblib: K local worker processes
                launcher.n_jobs = jobs
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=task_function, config=config
        )

    def compose(self, overrides: Sequence[str]) -> DictConfig:
        assert self.hydra_context is not None and self.config is not None
        return self.hydra_context.config_loader.load_sweep_config(self.config, list(overrides))

    def launch(self, batch: list[list[str]], first_idx: int, on_submit=None) -> Sequence[Any]:
        """Run the batch through the launcher; one that submits jobs (SLURM) calls
        `on_submit(job ids)`, in the batch's order, once they are queued."""
        assert self.launcher is not None
        if hasattr(self.launcher, "on_submit"):
            self.launcher.on_submit = on_submit
        return self.launcher.launch(batch, initial_job_idx=first_idx)

    def sweep(self, arguments: list[str]) -> Any:
        # Lazy: Hydra imports every plugin module in every app (training jobs too), and these
        # are the sweep's own (rich, the MLflow client).
        from sweeps.driver import drive
        from sweeps.errors import PlanError
        from sweeps.waves import WorkerLost
        from training.tracking import TrackingUnavailable

        assert self.config is not None
        try:
            # A cluster launcher checks that one point's request can run at all (sbatch
            # --test-only) before the sweep plans, records or submits anything.
            check = getattr(self.launcher, "check_resources", None)
            if check is not None and not self.config.sweep.dry_run:
                check()
            return drive(self.config, arguments, self.compose, self.launch)
        except (PlanError, ConfigError, TrackingUnavailable, SlurmError) as e:
            # Bad input: one line naming the field, as `python -m training.train` prints, instead
            # of Hydra's traceback (it cannot trim one raised in a sweeper). SystemExit is not
            # an Exception, so Hydra passes it through.
            print(f"error: {e}", file=sys.stderr)
            sys.exit(2)
        except WorkerLost as e:  # kill -9 of a local worker: the parent run FAILED with why
            print(f"error: {e.reason}", file=sys.stderr)
            sys.exit(1)
        except SweepStopped as e:  # the parent run says KILLED and why; no traceback
            print(
                f"sweep {self.config.sweep.name}: {e.reason}; rerun the same command to resume",
                file=sys.stderr,
            )
            sys.exit(128 + signal.SIGTERM)
        except KeyboardInterrupt as e:  # Ctrl-C; SIGTERM while a point trains in this process
            signame = getattr(e, "signame", "SIGINT")
            how = "Ctrl-C" if signame == "SIGINT" else signame
            print(
                f"sweep {self.config.sweep.name}: stopped by {how}; rerun the same command "
                "to resume",
                file=sys.stderr,
            )
            sys.exit(128 + getattr(signal, signame, signal.SIGINT))
        except OSError as e:  # a read-only runs folder or store, a full disk: the path, why
            if (line := environment_error(e)) is None:
                raise
            print(f"error: {line}", file=sys.stderr)
            sys.exit(2)
        finally:
            _remove_if_empty(Path(str(self.config.hydra.sweep.dir)))


def _remove_if_empty(sweep_dir: Path) -> None:
    """The launchers make the sweep folder (`<runs>/multirun/<sweep>/<time>`) whether or not
    anything is written there (local launchers write nothing): remove it, and its parents up to
    `multirun`, while they are empty."""
    for folder in [sweep_dir, *sweep_dir.parents]:
        try:
            folder.rmdir()  # only an empty folder
        except OSError:
            return
        if folder.name == "multirun":
            return
