"""Batches: fixed validation windows (or pairs) and seeded random training windows, read from
a token array (a memmap, or ShardedTokens over pre-tokenized shards)."""

from __future__ import annotations

import numpy as np

from training.config import ConfigError
from training.data.pairs import PairSplit


def val_pairs(val: PairSplit, seq_len: int, eval_tokens: int) -> PairSplit:
    """Fixed validation pairs: the first eval_tokens // seq_len pairs of the val split (a pair
    is seq_len positions of D, as a window is); identical for every run on the same cache."""
    n = eval_tokens // seq_len
    if n > len(val):
        raise ConfigError(
            f"data.eval_tokens={eval_tokens}: {n} pairs of train.seq_len={seq_len}, but the "
            f"validation split has only {len(val)} pairs; lower data.eval_tokens or raise "
            "data.val_fraction"
        )
    return val.head(n)


def val_windows(val: np.ndarray, seq_len: int, eval_tokens: int) -> np.ndarray:
    """Fixed validation windows: the first `eval_tokens` of the val stream cut into
    non-overlapping (seq_len + 1) windows; identical for every run on the same cache."""
    n = eval_tokens // seq_len
    if n < 1:
        raise ConfigError(f"data.eval_tokens={eval_tokens}: must be >= train.seq_len={seq_len}")
    if n * seq_len + 1 > len(val):
        raise ConfigError(
            f"data.eval_tokens={eval_tokens}: the validation split has only {len(val)} tokens; "
            "lower data.eval_tokens or raise data.val_fraction"
        )
    head = np.asarray(val[: n * seq_len + 1])  # one read, also from sharded tokens
    idx = np.arange(n)[:, None] * seq_len + np.arange(seq_len + 1)[None, :]
    return head[idx].astype(np.int64)  # (n, seq_len + 1)


class BatchSampler:
    """Random training windows from a seeded `torch.Generator`.

    Every micro-step draws the start offsets of the GLOBAL micro-batch (all ranks) and each rank
    takes its slice, so ranks never overlap and the stream depends only on the seed. The
    generator state is the data position saved in checkpoints.
    """

    def __init__(
        self,
        tokens: np.ndarray,
        seq_len: int,
        micro_batch: int,
        seed: int,
        rank: int = 0,
        world_size: int = 1,
    ):
        import torch

        if len(tokens) < seq_len + 2:
            raise ConfigError(
                f"train.seq_len={seq_len}: the training split has only {len(tokens)} tokens"
            )
        self.tokens, self.seq_len, self.micro_batch = tokens, seq_len, micro_batch
        self.rank, self.world_size = rank, world_size
        self.generator = torch.Generator().manual_seed(seed)

    def next(self):
        """(x, y): int64 tensors of shape (micro_batch, seq_len); y is x shifted by one."""
        import torch

        high = len(self.tokens) - self.seq_len - 1
        starts = torch.randint(
            0, high + 1, (self.world_size * self.micro_batch,), generator=self.generator
        )
        mine = starts[self.rank * self.micro_batch : (self.rank + 1) * self.micro_batch].tolist()
        windows = np.stack([self.tokens[s : s + self.seq_len + 1] for s in mine]).astype(np.int64)
        batch = torch.from_numpy(windows)  # (B, T + 1)
        return batch[:, :-1], batch[:, 1:]

    def state_dict(self) -> dict:
        return {"generator": self.generator.get_state()}

    def load_state_dict(self, state: dict) -> None:
        self.generator.set_state(state["generator"])
