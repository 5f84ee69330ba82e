"""The learning rate of every step of a run, replayed from its config columns in runs.csv.

    lrs_of(row)   # (total_steps,) lr of steps 0 .. total_steps - 1

Committed curves hold val_loss at eval points only (run_id, tokens, val_loss); a curve law needs
the lr at every step before each point. The analysis does not import training code, so this is
the schedule of `training.schedules` written again over numpy arrays (tests check that the two
agree step for step): linear warmup from 0, then constant, cosine to the last step, or WSD (a
linear decay from `decay_start` to the last step), ending at `min_lr_ratio` of the peak. A point
at `tokens` is after step tokens / batch_tokens: it saw the lr of every step before that.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

SCHEDULES = ("cosine", "wsd", "constant")


def warmup_steps(warmup: float, total_steps: int) -> int:
    """`warmup` < 1 is a fraction of the run's steps, >= 1 a number of steps."""
    steps = round(warmup * total_steps) if warmup < 1 else int(warmup)
    return min(steps, total_steps)


def wsd_decay_start(
    total_steps: int, decay_fraction: float, batch_tokens: int, decay_start_tokens=None
) -> int:
    """First decay step of a WSD run that was not branched from a checkpoint."""
    if decay_start_tokens is not None:
        return min(math.ceil(decay_start_tokens / batch_tokens), total_steps)
    return total_steps - round(decay_fraction * total_steps)


def multipliers(
    kind: str,
    total_steps: int,
    warmup: int,
    min_lr_ratio: float = 0.1,
    decay_start: int | None = None,
) -> np.ndarray:
    """(total_steps,) lr / peak lr of every step, as `training.schedules.Schedule.multiplier`."""
    if kind not in SCHEDULES:
        raise ValueError(f"unknown schedule {kind!r}; choose from {', '.join(SCHEDULES)}")
    step = np.arange(total_steps, dtype=float)
    floor = min_lr_ratio
    if kind == "constant":
        out = np.ones(total_steps)
    elif kind == "cosine":
        progress = np.minimum((step - warmup) / max(total_steps - warmup, 1), 1.0)
        out = floor + (1.0 - floor) * 0.5 * (1.0 + np.cos(np.pi * progress))
    else:
        start = max(total_steps if decay_start is None else decay_start, warmup)
        progress = np.minimum((step - start + 1) / max(total_steps - start, 1), 1.0)
        out = np.where(step < start, 1.0, 1.0 - (1.0 - floor) * progress)
    if warmup:
        out = np.where(step < warmup, (step + 1) / warmup, out)
    return out


def _value(row: Mapping, key: str, default=None):
    value = row.get(key, default)
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return default
    return value


def total_steps(row: Mapping) -> int:
    """ceil(train.tokens / train.batch_tokens), as the trainer counts steps."""
    return -(-int(float(row["train.tokens"])) // int(float(row["train.batch_tokens"])))


def lrs_of(row: Mapping) -> np.ndarray:
    """(total_steps,) lr of every step of a run from its runs.csv columns (`train.lr`,
    `train.schedule`, `train.warmup`, `train.min_lr_ratio`, `train.decay_fraction`,
    `train.decay_start_tokens`, `train.tokens`, `train.batch_tokens`)."""
    total = total_steps(row)
    kind = str(_value(row, "train.schedule", "cosine"))
    start = None
    if kind == "wsd":
        explicit = _value(row, "train.decay_start_tokens")
        start = wsd_decay_start(
            total,
            float(_value(row, "train.decay_fraction", 0.0)),
            int(float(row["train.batch_tokens"])),
            None if explicit is None else int(float(explicit)),
        )
    warm = warmup_steps(float(_value(row, "train.warmup", 0.0)), total)
    ratio = float(_value(row, "train.min_lr_ratio", 0.1))
    return float(row["train.lr"]) * multipliers(kind, total, warm, ratio, start)


def with_schedule(row: Mapping, **changes) -> dict:
    """A copy of a run's row with config columns changed, e.g. another schedule:
    with_schedule(row, **{"train.schedule": "cosine"})."""
    return {**dict(row), **changes}
