"""What a checkpoint of a training run holds (`capture`) and how a run continues from one
(`restore`): model, optimizer, data sampler, RNG, and the run's `TrainState` (its step, warmup,
where it came from, whose progress it is). The files themselves are written atomically by
`training.checkpoint`."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from training.config import ConfigError, TrainConfig


@dataclass
class TrainState:
    """Everything a resume needs besides the model, optimizer and sampler: where the run is,
    where it started (step 0, its own `last.pt`, or another run's branch point,
    `train.init_from`) and which MLflow run owns its checkpoints."""

    run_key: str
    warmup_steps: int
    step: int = 0  # optimizer steps done
    branched_from: str | None = None  # the run key of the checkpoint a branch starts from
    branch_step: int | None = None
    wall_time_s: float = 0.0  # trained before this process (a resume)
    last_train_loss: float = math.nan  # the last log window's mean: a resume at the end needs it
    # the step losses of the open log window (device tensors while training): an interrupt's
    # checkpoint falls between log steps, and the resumed run averages them with its own
    pending_losses: list = field(default_factory=list)
    mlflow_run_id: str | None = None  # whose progress this is: only that run resumes it
    mlflow_experiment_id: str | None = None


def capture(
    model,
    optimizer,
    sampler,
    state: TrainState,
    train: TrainConfig,
    train_time_s: float,
    shards: str | None = None,
) -> dict[str, Any]:
    """The checkpoint after `state.step` optimizer steps (`optimizer`: the torch optimizer),
    `train_time_s` trained by this process. `shards`: the folder (next to the file) where the
    ranks wrote the model and optimizer (`training.parallel.save_sharded`) instead."""
    if shards is None:
        weights = {"model": model.state_dict(), "optimizer": optimizer.state_dict()}
    else:
        weights = {"shards": shards}
    return {
        **weights,
        "sampler": sampler.state_dict(),
        "torch_rng": torch.get_rng_state(),
        "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
        "step": state.step,
        "tokens": state.step * train.batch_tokens,
        "batch_tokens": train.batch_tokens,
        "seq_len": train.seq_len,
        "warmup_steps": state.warmup_steps,
        "run_key": state.run_key,
        "branched_from": state.branched_from,
        "branch_step": state.branch_step,
        "mlflow_run_id": state.mlflow_run_id,
        "mlflow_experiment_id": state.mlflow_experiment_id,
        "wall_time_s": state.wall_time_s + train_time_s,
        "last_train_loss": state.last_train_loss,
        "pending_losses": [float(v) for v in state.pending_losses],
    }


def restore(
    state: dict[str, Any], model, optimizer, sampler, train: TrainConfig, folder: Path
) -> None:
    """Load a checkpoint's model, optimizer, sampler and RNG state; batch geometry and model
    must match it (a ConfigError naming the field otherwise). `folder`: where the checkpoint
    file is (a sharded checkpoint's shards are next to it); a sharded checkpoint loads on any
    number of ranks, sharded or not."""
    if state["batch_tokens"] != train.batch_tokens or state["seq_len"] != train.seq_len:
        raise ConfigError(
            f"train.batch_tokens/seq_len must match the checkpoint "
            f"({state['batch_tokens']}/{state['seq_len']}) to continue from it"
        )
    from training import parallel

    if "shards" in state:
        try:
            parallel.load_sharded(Path(folder) / state["shards"], model, optimizer)
        except (RuntimeError, ValueError, KeyError) as e:
            raise ConfigError(f"model: does not match the checkpoint's model ({e})") from None
    elif parallel.is_sharded(model):
        raise ConfigError(
            "train.parallel: fsdp cannot continue from a checkpoint written by a ddp run (one "
            "file, not shards); continue it with train.parallel=ddp"
        )
    else:
        try:
            model.load_state_dict(state["model"])
        except RuntimeError as e:
            raise ConfigError(f"model: does not match the checkpoint's model ({e})") from None
        optimizer.load_state_dict(state["optimizer"])
    # windows drawn by all ranks (what the masks' seeds count, `objectives._Batches`): the
    # step's, for checkpoints written before the sampler state held them
    drawn = state["step"] * (train.batch_tokens // train.seq_len)
    sampler.load_state_dict({"drawn": drawn, **state["sampler"]})
    torch.set_rng_state(state["torch_rng"])
    if torch.cuda.is_available() and state.get("cuda_rng") is not None:
        torch.cuda.set_rng_state_all(state["cuda_rng"])
