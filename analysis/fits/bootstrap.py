"""Bootstrap over runs: seeded resampling and percentile intervals.

Every fit in `analysis` accepts per-run weights; a bootstrap replicate is a row of resampling
counts (how often each run was drawn), so many replicates can be refitted in one batched call.
"""

from __future__ import annotations

import numpy as np

LEVEL = 0.95


def resample_counts(n: int, n_boot: int, seed: int, strata: np.ndarray | None = None) -> np.ndarray:
    """(n_boot, n) counts of each run in a resample with replacement.

    With `strata`, runs are resampled within each stratum (e.g. compute budget or variant), so
    every replicate keeps the design's groups and their sizes.
    """
    rng = np.random.default_rng(seed)
    counts = np.zeros((n_boot, n), dtype=float)
    groups = [np.arange(n)] if strata is None else _groups(np.asarray(strata))
    for members in groups:
        m = members.size
        draws = rng.integers(0, m, size=(n_boot, m))  # (R, m) positions within the stratum
        flat = (draws + m * np.arange(n_boot)[:, None]).ravel()
        counts[:, members] += np.bincount(flat, minlength=n_boot * m).reshape(n_boot, m)
    return counts


def distinct(counts: np.ndarray, values=None) -> np.ndarray:
    """(R,) how many distinct runs each replicate of counts (R, n) drew; with `values` ((n,) or
    (R, n), e.g. the compute of each run), how many distinct values among the drawn runs.

    A law through fewer distinct points than it has parameters is not determined by them: any
    refit "converges" to one of infinitely many exact fits. Every bootstrap that refits a law
    counts such a replicate as failed (`analysis.fits.laws.base.bootstrap`, `analysis.fits.fit`)."""
    drawn = np.asarray(counts) > 0
    if values is None:
        return drawn.sum(axis=1)
    values = np.broadcast_to(np.asarray(values, dtype=float), drawn.shape)
    return np.array([np.unique(v[d]).size for v, d in zip(values, drawn)], dtype=int)


def _groups(strata: np.ndarray) -> list[np.ndarray]:
    _, inverse = np.unique(strata, return_inverse=True)
    return [np.flatnonzero(inverse == k) for k in range(inverse.max() + 1)]


def percentile_interval(samples: np.ndarray, level: float = LEVEL) -> list[float] | None:
    """Percentile interval of the finite samples, or None when fewer than 10 are finite."""
    samples = np.asarray(samples, dtype=float)
    finite = samples[np.isfinite(samples)]
    if finite.size < 10:
        return None
    tail = 100 * (1 - level) / 2
    lo, hi = np.percentile(finite, [tail, 100 - tail])
    return [float(lo), float(hi)]


def intervals(replicates: dict[str, np.ndarray], level: float = LEVEL) -> dict:
    """{quantity: [lo, hi]} for every quantity of a dict of (R,) replicate arrays."""
    return {name: percentile_interval(values, level) for name, values in replicates.items()}
