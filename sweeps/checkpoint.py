"""Atomic checkpoints: write a temporary file, fsync it, rename it over the target.

A crash (or SIGKILL) mid-write leaves at worst a stray `*.tmp-*` file, never a truncated
`last.pt`: readers only ever see a complete old file or a complete new one.

Layout under `<runs_dir>/<run_key>/`:
    last.pt               periodic resume checkpoint (train.checkpoint_every)
    tokens_<T>.pt         named branch checkpoints (train.save_at_tokens)
    config.yaml           the resolved config
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

LAST = "last.pt"


def branch_name(tokens: int) -> str:
    return f"tokens_{tokens}.pt"


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, write: Callable[[BinaryIO], None]) -> None:
    """Call `write(file)` on a temporary file next to `path`, fsync, then rename it to `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".tmp-")
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def save_checkpoint(path: Path, state: dict[str, Any]) -> None:
    """torch.save `state` to `path` atomically."""
    import torch

    atomic_write(Path(path), lambda f: torch.save(state, f))


def load_checkpoint(path: Path) -> dict[str, Any]:
    """Load a checkpoint to CPU (tensors, numbers, strings only: weights_only=True)."""
    import torch

    return torch.load(Path(path), map_location="cpu", weights_only=True)


def run_dir(runs_dir: Path, run_key: str) -> Path:
    return Path(runs_dir) / run_key


def branch_checkpoint_path(runs_dir: Path, run_key: str, tokens: int) -> Path:
    """Where the run `run_key` saves its `train.save_at_tokens` checkpoint for `tokens`."""
    return run_dir(runs_dir, run_key) / branch_name(int(tokens))
