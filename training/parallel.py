"""How a run's model is spread over its processes: `train.parallel` (ddp | fsdp).

    ddp   every rank holds the whole model, gradients and AdamW state; Accelerate's `prepare`
          wraps it in DistributedDataParallel (gradients all-reduced). Checkpoints: one
          `torch.save` by rank 0 (`training.checkpoint`).
    fsdp  FSDP2: `fully_shard` on each block (every `nn.ModuleList` child of the model: the
          decoder's and encoder's `blocks`, the encoder-decoder's `encoder` and `decoder`) and
          then on the whole model (embeddings, head, final norm), over one data-parallel mesh
          of all ranks. Each rank keeps 1/world of every parameter, gradient and AdamW moment;
          a block's full parameters exist only while it computes (all-gathered before its
          forward and backward, freed after). Checkpoints: `torch.distributed.checkpoint`,
          each rank writing its own shards (`save_sharded` / `load_sharded`).

Why `fully_shard` directly and not Accelerate's FSDP2 plugin: Accelerate 1.15 turns FSDP on
only for multi-accelerator runs (`AcceleratorState` keeps `MULTI_CPU` for gloo ranks and
ignores the plugin there), so its FSDP path could never run in this project's tests, which
train on CPU ranks. `fully_shard` is the same call on CPU (gloo) and GPU (nccl): one code path,
tested here and run on GPUs. Accelerate still forms the process group and does the reductions;
the sharded model is not passed to its `prepare` (which would wrap it in DDP).

The model stays free of devices and distribution (models/ knows nothing of this): parallelism
is applied here, after it is built. On one process `fsdp` trains the plain module (there is
nothing to shard over) and still writes sharded checkpoints, so a run can move between one
process and many.
"""

from __future__ import annotations

import contextlib
import os
import warnings
from pathlib import Path
from typing import Any

import torch
from torch import nn

# The precision FSDP2 computes in (parameters all-gathered in it) per `train.precision`;
# gradients are reduced and AdamW steps in fp32, as torchtitan and OLMo-core do.
PARAM_DTYPES = {"fp32": None, "bf16": torch.bfloat16}


# Methods a model calls on a part of a block outside the block's forward: the encoder-decoder
# computes the cross-attention's keys and values of the memory once per source (`memory_kv`).
# Such a part is sharded on its own, and calling the method all-gathers it as a forward does.
OUTSIDE_FORWARD = ("memory_kv",)


def blocks(model: nn.Module) -> list[nn.Module]:
    """The model's transformer blocks: every module of its top-level `nn.ModuleList`s."""
    return [
        block for child in model.children() if isinstance(child, nn.ModuleList) for block in child
    ]


def apply(model: nn.Module, train, precision: str, world: int) -> nn.Module:
    """`train.activation_checkpointing`, then `train.parallel=fsdp` over `world` ranks (none
    on one process), to `model` in place."""
    if train.activation_checkpointing:
        from torch.distributed._composable import checkpoint

        for block in blocks(model):
            checkpoint(block)
    if train.parallel == "fsdp" and world > 1:
        shard(model, precision, world)
    return model


def shard(model: nn.Module, precision: str, world: int) -> nn.Module:
    """FSDP2 on each block, then the whole model, over one mesh of `world` ranks. `precision`:
    fp32 | bf16 (resolved; fp16 is refused by the config: FSDP2 would need a sharded loss
    scaler)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import (
        MixedPrecisionPolicy,
        fully_shard,
        register_fsdp_forward_method,
    )

    device = "cuda" if torch.cuda.is_available() else "cpu"
    mesh = init_device_mesh(device, (world,), mesh_dim_names=("dp",))
    policy = MixedPrecisionPolicy(param_dtype=PARAM_DTYPES[precision], reduce_dtype=torch.float32)
    for block in blocks(model):
        for part in block.modules():
            for method in OUTSIDE_FORWARD:
                if part is not block and hasattr(part, method):
                    fully_shard(part, mesh=mesh, mp_policy=policy)
                    register_fsdp_forward_method(part, method)
        fully_shard(block, mesh=mesh, mp_policy=policy)
    # the root keeps its parameters gathered after the forward: the backward needs them first
    fully_shard(model, mesh=mesh, mp_policy=policy, reshard_after_forward=False)
    return model


def is_sharded(model: nn.Module) -> bool:
    from torch.distributed.fsdp import FSDPModule

    return isinstance(model, FSDPModule)


def named_state(model: nn.Module, optimizer) -> tuple[dict[str, Any], dict[str, Any]]:
    """(model, optimizer) state dicts keyed by parameter name (not by optimizer index), each
    tensor as this rank holds it: a shard (DTensor) under FSDP, the whole tensor otherwise.
    The form `torch.distributed.checkpoint` saves and loads whatever the world size."""
    from torch.distributed.checkpoint.state_dict import get_state_dict

    return get_state_dict(model, optimizer)


def save_sharded(folder: Path, model: nn.Module, optimizer) -> None:
    """Every rank writes its shards of the model and AdamW state to `folder` (a collective:
    all ranks call it); rank 0 writes the folder's `.metadata` last, after all ranks wrote."""
    import torch.distributed.checkpoint as dcp

    model_sd, optim_sd = named_state(model, optimizer)
    with _one_process_is_meant():
        dcp.save({"model": model_sd, "optimizer": optim_sd}, checkpoint_id=str(folder))


def load_sharded(folder: Path, model: nn.Module, optimizer) -> None:
    """Load `folder` (written by `save_sharded` on any number of ranks) into `model` and
    `optimizer` as this run shards them: each rank reads the slices it holds."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import set_state_dict

    model_sd, optim_sd = named_state(model, optimizer)
    state = {"model": model_sd, "optimizer": optim_sd}
    with _one_process_is_meant():
        dcp.load(state, checkpoint_id=str(folder))
    set_state_dict(
        model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"]
    )


@contextlib.contextmanager
def _one_process_is_meant():
    """Without a process group `torch.distributed.checkpoint` warns, at every save, that it
    assumes one process: here that is the intent (a one-process run, the export)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        yield


def nonce() -> str:
    """A new shard folder's suffix (rank 0's, broadcast: the same on every rank)."""
    return os.urandom(4).hex()
