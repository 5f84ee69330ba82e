"""Batch size as a tuned axis: `sweep.tune: {train.batch_tokens: [...], ...}`.

Every candidate of an arm trains the arm's token budget D, so a candidate with B tokens per
step trains D / B steps: batch sizes are compared at equal data and equal FLOPs, the way
DeepSeek LLM (section 3.1), Step Law and Power Lines measure B_opt. For that, D, the WSD decay
start and the halving rungs must be whole batches of every candidate. The arm's own point
therefore gets `train.batch_tokens` = the candidates' least common multiple (the granule):
IsoFLOP rounding (`sweeps.plan`), the stable phase and the rungs (`sweeps.tuning`) are all
whole batches of the arm's batch, so they come out whole batches of each candidate. A grid
point's `train.tokens` is rounded to whole granules the same way. The granule itself never
trains: every tuning run gets a candidate's batch (the tuned key replaces the arm's).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

from sweeps import plan
from sweeps.plan import PlanError, Point
from sweeps.points import BATCH_KEY

FIELD = f"sweep.tune.{BATCH_KEY}"


def batch_grid(tune: plan.TuneSpec | None) -> list[int]:
    """The tuned batch sizes as whole token counts; [] when the batch is not tuned."""
    if tune is None or BATCH_KEY not in tune.grid:
        return []
    out = []
    for value in tune.grid[BATCH_KEY]:
        try:  # YAML 1.1 reads 4e3 as a string
            number = float(value)
        except (TypeError, ValueError):
            number = math.nan
        if isinstance(value, bool) or not (math.isfinite(number) and number > 0) or number % 1:
            raise PlanError(f"{FIELD}: expected positive whole token counts, got {value!r}")
        out.append(int(number))
    return out


def granule(batches: Sequence[int]) -> int:
    """Tokens every candidate batch divides: their least common multiple."""
    return math.lcm(*batches)


def _key(override: str) -> str:
    return override.split("=", 1)[0].lstrip("+")


def with_granule(spec: plan.SweepSpec, points: Sequence[Point], facts_of: plan.Resolver):
    """Points of a sweep that tunes the batch: each at the granule batch, a grid point's D
    rounded to whole granules. Fails (naming the field) on a batch that is not whole sequences
    or larger than a grid point's D, before anything trains."""
    batches = batch_grid(spec.tune)
    if not batches:
        return list(points)
    step = granule(batches)
    out = []
    for i, p in enumerate(points):
        over = [o for o in p.overrides if _key(o) != BATCH_KEY]
        over.append(f"{BATCH_KEY}={step}")
        try:
            facts = facts_of(over)
        except PlanError:
            raise
        except ValueError:  # a model the factory cannot build: plan.resolve skips the point
            out.append(p)
            continue
        _check_batches(batches, facts, i, p)
        if p.budget is None:  # a grid point: its D (train.tokens) in whole granules
            tokens = max(1, round(facts.tokens / step)) * step
            over = [o for o in over if _key(o) != plan.TOKENS_KEY]
            over.append(f"{plan.TOKENS_KEY}={tokens}")
        out.append(replace(p, overrides=tuple(over)))
    return out


def _check_batches(batches: list[int], facts: plan.RunFacts, i: int, p: Point) -> None:
    where = f"point #{i}: {' '.join(p.overrides)}"
    for b in batches:
        if facts.seq_len and b % facts.seq_len:
            raise PlanError(
                f"{FIELD}: {b} is not a multiple of train.seq_len={facts.seq_len} ({where})"
            )
        if p.budget is None and b > facts.tokens:
            raise PlanError(
                f"{FIELD}: {b} is larger than the token budget D = {facts.tokens:.0f} "
                f"(not one step; {where})"
            )


def describe(tp) -> str | None:
    """The dry run's line for a tuned batch: the candidates, the granule, steps per budget."""
    batches = batch_grid(tp.spec)
    if not batches:
        return None
    step = granule(batches)
    budgets = sorted({a.tokens for a in tp.arms})
    steps = "; ".join(
        f"D {plan.format_count(d)}: " + ", ".join(str(math.ceil(d / b)) for b in batches)
        for d in budgets
    )
    return (
        f"batch axis: {BATCH_KEY} in {', '.join(map(str, batches))} tokens at each arm's "
        f"fixed token budget D (steps = D / B); D, the decay start and the rungs are whole "
        f"batches of {step} tokens (the candidates' least common multiple); steps per candidate: "
        f"{steps}"
    )
