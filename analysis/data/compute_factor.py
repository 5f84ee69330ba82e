"""What a run's compute C counts per 6 N D: the factor k = C / (6 N D) of its model family.

A decoder (and an encoder, whose D counts input tokens) passes every token through every
non-embedding parameter: C = 6 N D, k = 1. An encoder-decoder's D counts the text tokens of its
training windows (what the corpus supplies) and N both stacks' non-embedding parameters, but
each token is read by ONE stack: the encoder reads the corrupted source (~90% of a window plus
sentinels), the decoder the targets (~20%). Its training run logs `flops_6nd` = 6 (N_enc S +
N_dec T) per sequence (`training.objectives.SpanCorruption.accounting`), about 0.5 x 6 N D. The
analysis keeps the run's own number: C = k 6 N D with k = flops_6nd / (6 N D) read from the run
(column `k`; a run or CSV without one: k = 1, the decoder convention), and every conversion
between C and D (IsoFLOP D_opt, the allocation N_opt / D_opt, predictions, f(N) under exact
FLOPs) uses the k of the runs fitted, so a budget C means what the sweep planned
(`sweeps.plan.RunFacts.six_n`) and the runs logged.

k of an encoder-decoder depends on how its parameters split between the stacks; along one
ladder it varies by ~0.05% (0.5044-0.5047 on the reference families sweep). One fit uses one k,
the geometric mean of its runs'; runs whose k differ by more than K_RTOL (two families' runs,
never pooled: `analysis.data.families`) are refused.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.data.load import K_COLUMN, InputError

COLUMN = K_COLUMN
K_RTOL = 0.01  # the most one fit's runs' k may differ (relative) and still share one k

# fit.json's `compute_convention` text for a family whose C is not 6 N D (k != 1)
COUNTS = {
    "encoder_decoder": {
        "N": "non-embedding parameters of both stacks (encoder + decoder)",
        "D": "text tokens of the training windows (seq_len per sequence, what the corpus "
        "supplies); the encoder reads the corrupted source, the decoder the targets",
        "C": "6 (N_enc S + N_dec T) per sequence of S source and T target tokens, as the runs "
        "log flops_6nd: each token passes one stack, so C = k 6 N D",
    },
    "encoder_decoder/seq2seq_pairs": {
        "N": "non-embedding parameters of both stacks (encoder + decoder)",
        "D": "source + target positions of the padded pairs (seq_len per pair)",
        "C": "6 (N_enc S + N_dec T) per pair of S = data.src_len source and T target "
        "positions, as the runs log flops_6nd: each position passes one stack",
    },
}
GENERIC = {
    "N": "non-embedding parameters",
    "D": "tokens trained",
    "C": "the runs' logged flops_6nd: C = k 6 N D",
}


def of_runs(runs: pd.DataFrame, what: str = "the runs") -> float:
    """The one k of a set of runs (1.0 exactly without a `k` column, or where all are 1);
    InputError (one line) when their k differ by more than K_RTOL."""
    if COLUMN not in runs.columns:
        return 1.0
    k = pd.to_numeric(runs[COLUMN], errors="coerce").fillna(1.0).to_numpy(dtype=float)
    if (k == 1.0).all():
        return 1.0
    if k.max() > k.min() * (1 + K_RTOL):
        raise InputError(
            f"{what} mix compute conventions: k = C / (6 N D) from {k.min():.4g} to "
            f"{k.max():.4g} (column '{COLUMN}'); one k per fit, so fit one family at a time "
            "(--group family)"
        )
    return float(np.exp(np.mean(np.log(k))))


def section(k: float, family: str | None) -> dict:
    """fit.json's `compute_convention` of a fit whose k is not 1: k and what N, D, C count."""
    return {"k": k, **COUNTS.get(str(family), GENERIC)}


def label(k: float) -> str:
    """'6ND', or 'k 6ND, k = 0.5045' where the fit's C is k times 6ND."""
    return "6ND" if k == 1.0 else f"k 6ND, k = {k:.4g}"
