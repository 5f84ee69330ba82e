"""One training run: `python -m training.train [overrides]` or `train(cfg)` from Python.

A run is a pure function of its resolved config (see training/config.py): the config fixes the
run key, the data, the model, the optimizer and the schedule. The run writes an MLflow run
(schema in docs/contracts.md) and checkpoints under `<runs_dir>/<run_key>/`; rerunning the same
config in the same experiment resumes from the last checkpoint into the same MLflow run, or
returns at once if that run already FINISHED (in another experiment it trains in full). Sweeps
call `train()` many times in one process, so all state (the Accelerator, the MLflow client) is
created inside it.

The loop itself is `training.trainer.Trainer`; its parts live next to it: `step` (one optimizer
step, evaluation), `run_record` (the MLflow run), `run_end` (the records of how it ends),
`hardware` (threads, hardware params, torch.compile), `train_state` (what a checkpoint holds),
`signals`, `ranks` (the processes). This module is the CLI and `train()`.
"""

from __future__ import annotations

import contextlib
import signal
import sys
from dataclasses import asdict
from typing import Any

from training.cli import check_composes, environment_error
from training.config import ConfigError
from training.paths import PROJECT_ROOT
from training.ranks import wait_for_all_ranks
from training.result import TrainResult
from training.signals import Interrupted, Signals
from training.tracking import TrackingUnavailable

__all__ = ["Interrupted", "TrainResult", "main", "train"]


def train(cfg: Any) -> TrainResult:
    """Train one model from a composed config (Hydra DictConfig or a plain nested dict).

    Returns a TrainResult; a diverged run returns status FAILED (the CLI exits non-zero).
    Raises ConfigError / TrackingUnavailable before any work for bad input, and `Interrupted`
    (a KeyboardInterrupt) on SIGTERM or Ctrl-C, after marking the MLflow run KILLED.
    """
    # torch and Accelerate (~3 s) load with the loop, not with this module: the CLI checks
    # its command line first (`check_composes`), and sweeps import `train` before they need it.
    from training.trainer import Trainer

    signals = Signals()
    with contextlib.ExitStack() as stack:
        signals.install(stack)
        result = Trainer(cfg, signals, stack).run()
    if signals.received is not None:  # came after the loop: the run finished; pass it on
        signal.raise_signal(signals.received)
    return result


# ---------------------------------------------------------------- CLI
def _main(cfg) -> None:
    try:
        result = train(cfg)
    except (ConfigError, TrackingUnavailable) as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    except OSError as e:  # a read-only or full disk: the path and why (a run is FAILED already)
        if (line := environment_error(e)) is None:
            raise
        print(f"error: {line}", file=sys.stderr)
        sys.exit(2)
    except Interrupted as e:  # the MLflow run is KILLED; the shell's code for that signal
        print(f"error: {e.reason}", file=sys.stderr)
        sys.exit(128 + getattr(signal, e.signame, signal.SIGTERM))
    wait_for_all_ranks()  # every rank returned its result (FAILED ones too)
    if result.status != "FINISHED":
        print(f"error: run {result.run_key} {result.failure_reason}", file=sys.stderr)
        sys.exit(1)
    print(
        "result: " + " ".join(f"{k}={v}" for k, v in asdict(result).items() if v not in (None, "")),
        flush=True,
    )


def main() -> None:
    import hydra  # ~1.2 s: the CLI's alone, not `from training.train import train`'s

    check_composes(PROJECT_ROOT / "conf", "config", sys.argv[1:])  # Hydra's errors: one line
    hydra.main(config_path="../conf", config_name="config", version_base="1.3")(_main)()


if __name__ == "__main__":
    main()
