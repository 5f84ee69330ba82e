"""What a run runs on: the thread count a resumed run started with, the `hardware.*` params
its throughput was measured on, and `torch.compile` of its model (`training.trainer` uses each
once per run).
"""

from __future__ import annotations

import contextlib
import logging
import os
import platform
from pathlib import Path
from typing import Any

import torch

log = logging.getLogger("training.train")


def use_recorded_threads(recorded: str | None, run_key: str, stack: contextlib.ExitStack) -> None:
    """Resume with the intra-op thread count the run started with (its `torch_threads` param):
    reductions split differently across threads, so 1 and 2 threads differ in about the 9th
    digit of the loss (docs/contracts.md). Restored when the run returns (sweeps train many)."""
    now = torch.get_num_threads()
    if recorded is None or int(recorded) == now:
        return
    log.warning(
        "run %s started with %s threads: resuming with %s (this process had %d)",
        run_key,
        recorded,
        recorded,
        now,
    )
    stack.callback(torch.set_num_threads, now)
    torch.set_num_threads(int(recorded))


def hardware_params(device, mixed_precision: str, compile_on: bool) -> dict[str, Any]:
    """What a run's throughput was measured on: the device's name, the precision and compile
    actually used (`train.precision` / `train.compile` may say auto) and the host's CPUs."""
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
    else:
        name = next(
            (
                line.split(":", 1)[1].strip()
                for line in _read_lines("/proc/cpuinfo")
                if line.startswith("model name")
            ),
            platform.processor() or platform.machine(),
        )
    return {
        "hardware.device": f"{device.type}: {name}",
        "hardware.precision": {"no": "fp32"}.get(mixed_precision, mixed_precision),
        "hardware.compile": bool(compile_on),
        "hardware.cpus": os.cpu_count(),
    }


def _read_lines(path: str) -> list[str]:
    try:
        return Path(path).read_text().splitlines()
    except OSError:
        return []


def compiled(raw_model):
    """torch.compile of the model. A sweep trains many shapes in one process: each compiles
    once (a shape seen before reuses its code, a new model object of that shape too), but past
    Dynamo's recompile_limit (8) new shapes would silently run eager."""
    import torch._dynamo  # ~2 s, only when compiling

    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 256)
    return torch.compile(raw_model)
