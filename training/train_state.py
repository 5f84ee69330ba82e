"""What a checkpoint of a training run holds (`capture`) and how a run continues from one
(`restore`): model, optimizer, data sampler, RNG, step, and where the run came from. The files
themselves are written atomically by `training.checkpoint`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from training.config import ConfigError, TrainConfig


@dataclass
class Start:
    """Where a run starts: step 0, its own `last.pt` (a resume) or another run's branch point
    (`train.init_from`)."""

    warmup_steps: int
    step: int = 0
    branched_from: str | None = None  # the run key of the checkpoint a branch starts from
    branch_step: int | None = None
    wall_time_s: float = 0.0  # trained before this process (a resume)
    pending_losses: list[float] = field(default_factory=list)  # of the window it stopped in


def capture(
    model, optimizer, sampler, step: int, train: TrainConfig, start: Start, run_key: str,
    mlflow_run_id: str | None, mlflow_experiment_id: str | None, train_time_s: float,
    pending_losses=(),
) -> dict[str, Any]:  # fmt: skip
    """The state to save after `step` optimizer steps (`optimizer`: the torch optimizer)."""
    import torch

    return {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "sampler": sampler.state_dict(),
        "torch_rng": torch.get_rng_state(),
        "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
        "step": step,
        "tokens": step * train.batch_tokens,
        "batch_tokens": train.batch_tokens,
        "seq_len": train.seq_len,
        "warmup_steps": start.warmup_steps,
        "run_key": run_key,
        "branched_from": start.branched_from,
        "branch_step": start.branch_step,
        "mlflow_run_id": mlflow_run_id,  # whose progress this is: only that run resumes it
        "mlflow_experiment_id": mlflow_experiment_id,
        "wall_time_s": start.wall_time_s + train_time_s,
        # an interrupt's checkpoint falls between log steps: the losses of its window
        "pending_losses": [float(v) for v in pending_losses],
    }


def restore(state: dict[str, Any], model, optimizer, sampler, train: TrainConfig) -> None:
    """Load a checkpoint's model, optimizer, sampler and RNG state; batch geometry and model
    must match it (a ConfigError naming the field otherwise)."""
    import torch

    if state["batch_tokens"] != train.batch_tokens or state["seq_len"] != train.seq_len:
        raise ConfigError(
            f"train.batch_tokens/seq_len must match the checkpoint "
            f"({state['batch_tokens']}/{state['seq_len']}) to continue from it"
        )
    try:
        model.load_state_dict(state["model"])
    except RuntimeError as e:
        raise ConfigError(f"model: does not match the checkpoint's model ({e})") from None
    optimizer.load_state_dict(state["optimizer"])
    sampler.load_state_dict(state["sampler"])
    torch.set_rng_state(state["torch_rng"])
    if torch.cuda.is_available() and state.get("cuda_rng") is not None:
        torch.cuda.set_rng_state_all(state["cuda_rng"])
