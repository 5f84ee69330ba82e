"""The processes of one run: Accelerate's per-run state, the process group's barrier and
teardown, and handing the main process's decisions to the other ranks.

The CLI module (`training.train`) imports this one before torch: accelerate and
torch.distributed are imported where they are used."""

from __future__ import annotations

import sys
from typing import Any


def reset_accelerate_state() -> None:
    """Forget the previous run's Accelerator: its state is a process-wide singleton, and a
    sweep calls train() repeatedly in one process (mixed precision may differ between runs).
    The process group (PartialState) is kept: it belongs to the process, not the run."""
    from accelerate.state import AcceleratorState, GradientState

    AcceleratorState._reset_state(reset_partial_state=False)
    GradientState._reset_state()


def _group():
    """``torch.distributed`` when this process belongs to a process group, else None."""
    if "torch" not in sys.modules:  # failed before anything imported torch: no group
        return None
    import torch.distributed as dist

    return dist if dist.is_available() and dist.is_initialized() else None


def wait_for_all_ranks() -> None:
    """A barrier, where there is a group: only where every rank gets (a run that returned),
    else a rank that failed alone would leave the others waiting in it.

    Why a run ends with one: a gloo worker thread lets go of a finished collective (and of its
    tensors) a moment after ``wait()`` returns, and freeing a tensor that Python has seen needs
    the GIL. A rank that exits right after its last all-reduce may be finalizing by then, and
    Python ends that thread inside a noexcept destructor: ``std::terminate``, SIGABRT after a
    successful run. The barrier waits with the GIL released, which lets the threads finish
    (measured: docs/performance.md, single measurements)."""
    if (dist := _group()) is not None:
        dist.barrier()


def end_process_group() -> None:
    """Destroy the process group, if there is one: the documented teardown, run at exit
    (registered by ``train``; a sweep keeps the group from run to run). It joins gloo's threads
    only once nothing else holds the group: a DistributedDataParallel wrapper, even freed,
    keeps it alive in torch 2.13, so a clean exit also needs ``wait_for_all_ranks`` first."""
    if (dist := _group()) is not None:
        dist.destroy_process_group()


def lost_a_rank(e: BaseException) -> bool:
    """Whether `e` is a collective that failed because another rank is gone (killed, its node
    lost): NCCL raises `DistBackendError`, gloo a RuntimeError from its TCP transport
    ("Connection reset by peer", "Connection closed by peer")."""
    if (dist := _group()) is None:
        return False
    if isinstance(e, (dist.DistBackendError, dist.DistNetworkError)):
        return True
    return isinstance(e, RuntimeError) and "gloo/transport/" in str(e)


def broadcast(obj: Any, accelerator) -> Any:
    """The main process's `obj` on every rank (itself with one process)."""
    if accelerator.num_processes == 1:
        return obj
    from accelerate.utils import broadcast_object_list

    return broadcast_object_list([obj])[0]
