"""Launch order of a sweep's points: as planned, or the variants in turn.

With `sweep.interleave: true` the points of each wave are launched one variant after the
other, the order reversed every other round (A B, B A, A B, ...), as `benchmarks/interleave.py`
orders repetitions of a timing: on a machine whose load drifts while the sweep runs, each
variant's runs then meet the same load on average, so the variants' measured throughput
compares the architectures rather than the hour at which each ran. The plan (indices, run keys,
what is trained) does not change, only the order in which points start.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from sweeps.plan import PlannedRun

Run = TypeVar("Run", bound=PlannedRun)


def interleaved(runs: Sequence[Run]) -> list[Run]:
    """`runs` with the variants in turn: round k takes each variant's k-th point (in plan
    order), rounds alternate forward and reversed; a variant with fewer points drops out."""
    lanes: dict[str, list[Run]] = {}
    for run in runs:
        lanes.setdefault(run.variant, []).append(run)
    order: list[Run] = []
    for k in range(max((len(lane) for lane in lanes.values()), default=0)):
        round_k = [lane[k] for lane in lanes.values() if k < len(lane)]
        order += round_k if k % 2 == 0 else round_k[::-1]
    return order
