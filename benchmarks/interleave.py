"""Interleaved repetitions: compare variants of one step in one process, robust to other load.

Every repetition runs each variant once, back to back, and the order is reversed every other
repetition so that no variant always runs first (or always right after the same neighbour).
A comparison is the median over repetitions of the per-repetition time ratio: both times of a
ratio were measured a moment apart, so slow drifts in machine load cancel.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Iterator
from typing import TypeVar

K = TypeVar("K")


def repetitions(variants: Iterable[K], reps: int) -> Iterator[list[K]]:
    """The order of the variants in each of `reps` repetitions: as given, then reversed, ..."""
    order = list(variants)
    for rep in range(reps):
        yield order if rep % 2 == 0 else order[::-1]


def median_ratio(base_times, times) -> float:
    """Median over repetitions of base time / time: > 1 when the variant is faster than base."""
    return statistics.median(b / t for b, t in zip(base_times, times, strict=True))
