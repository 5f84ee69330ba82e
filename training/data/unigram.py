"""The unigram entropy of a token stream: the loss (nats per token) of a model that has learnt
only the tokens' frequencies, H = -sum_i p_i ln p_i, p_i = count_i / n.

Counted in chunks (one bincount per chunk into an int64 table of the vocabulary's size), so
memory stays flat however long the stream; the counts are exact integers, so the result does
not depend on the chunking.
"""

from __future__ import annotations

import numpy as np

CHUNK_TOKENS = 1 << 22  # tokens per bincount (its intp copy: 32 MiB)


class UnigramCounts:
    """Token counts accumulated over chunks of a stream."""

    def __init__(self, vocab_size: int = 0):
        self.counts = np.zeros(vocab_size, dtype=np.int64)

    def add(self, tokens: np.ndarray) -> None:
        for i in range(0, len(tokens), CHUNK_TOKENS):
            part = np.bincount(np.asarray(tokens[i : i + CHUNK_TOKENS]), minlength=len(self.counts))
            if len(part) > len(self.counts):
                self.counts = np.pad(self.counts, (0, len(part) - len(self.counts)))
            self.counts += part

    def entropy(self) -> float | None:
        """H in nats per token; None for an empty stream."""
        n = int(self.counts.sum())
        if not n:
            return None
        c = self.counts[self.counts > 0].astype(np.float64)
        return float(np.log(n) - (c * np.log(c)).sum() / n)


def unigram_entropy(parts, vocab_size: int = 0) -> float | None:
    """H of the tokens of `parts` (one array, or a list of arrays read one after another)."""
    counts = UnigramCounts(vocab_size)
    for part in parts if isinstance(parts, list) else [parts]:
        counts.add(part)
    return counts.entropy()
