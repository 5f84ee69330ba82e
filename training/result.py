"""What `training.train.train` returns: `TrainResult`, one run's outcome (stdlib only, so the
CLI module can name it before torch is loaded)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class TrainResult:
    run_key: str
    run_id: str | None  # MLflow run id (None on non-main processes)
    status: str  # FINISHED | FAILED
    final_val_loss: float | None = None
    final_train_loss: float | None = None
    tokens_consumed: int = 0
    steps: int = 0
    wall_time_s: float = 0.0
    failure_reason: str | None = None
    run_dir: str = ""
    reused: bool = False  # a FINISHED run with this key existed; nothing was trained
