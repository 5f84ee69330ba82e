"""Learning-rate schedules as pure functions of the step: lr(step) = train.lr * multiplier(step).

All schedules warm up linearly from 0 over `warmup_steps` and end at `min_lr_ratio`:
- cosine: cosine decay from the end of warmup to exactly the last step of this run
  (WarmupCosine: the decay length is tied to this run's token budget).
- wsd: warmup, stable at the peak, then a linear decay from `decay_start` to the last step
  (warmup-stable-decay). With `decay_start == total_steps` (decay_fraction=0) it never decays,
  which is what a stable run that is later branched into decay runs uses.
- constant: warmup, then the peak to the end.
Steps count from 0; step s uses multiplier(s) for the update that takes it to s + 1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal


def warmup_steps(warmup: float, total_steps: int) -> int:
    """`warmup` < 1 is a fraction of the run's steps, >= 1 a number of steps."""
    steps = round(warmup * total_steps) if warmup < 1 else int(warmup)
    return min(steps, total_steps)


@dataclass(frozen=True)
class Schedule:
    kind: Literal["cosine", "wsd", "constant"]
    total_steps: int
    warmup_steps: int
    min_lr_ratio: float = 0.1
    decay_start: int | None = None  # wsd only: first step of the decay

    def multiplier(self, step: int) -> float:
        if step < self.warmup_steps:
            return (step + 1) / self.warmup_steps
        floor = self.min_lr_ratio
        if self.kind == "constant":
            return 1.0
        if self.kind == "cosine":
            span = max(self.total_steps - self.warmup_steps, 1)
            progress = min((step - self.warmup_steps) / span, 1.0)
            return floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))
        # wsd
        start = self.total_steps if self.decay_start is None else self.decay_start
        start = max(start, self.warmup_steps)
        if step < start:
            return 1.0
        span = max(self.total_steps - start, 1)
        progress = min((step - start + 1) / span, 1.0)
        return 1.0 - (1.0 - floor) * progress


def wsd_decay_start(
    total_steps: int,
    decay_fraction: float,
    batch_tokens: int,
    decay_start_tokens: int | None = None,
    branch_step: int | None = None,
) -> int:
    """First decay step of a WSD run.

    Explicit `decay_start_tokens` wins; a run branched from a checkpoint (`branch_step`) decays
    from the branch point; otherwise the decay covers the last `decay_fraction` of the run.
    """
    if decay_start_tokens is not None:
        return min(math.ceil(decay_start_tokens / batch_tokens), total_steps)
    if branch_step is not None:
        return branch_step
    return total_steps - round(decay_fraction * total_steps)
