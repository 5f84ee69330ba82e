"""Batches: fixed validation windows (or pairs) and seeded random training windows, read from
a token array (a memmap, or ShardedTokens over pre-tokenized shards), and `Prefetcher`, which
makes a sampler's next batches in a background thread while the current step runs."""

from __future__ import annotations

import queue
import threading

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
        import torch  # here: `python -m training.data` prepares corpora without torch (~2 s)

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
        batch = np.empty((len(mine), self.seq_len + 1), dtype=np.int64)  # (B, T + 1)
        for row, s in zip(batch, mine, strict=True):  # widened while copied: no temporary
            row[:] = self.tokens[s : s + self.seq_len + 1]
        batch = torch.from_numpy(batch)
        return batch[:, :-1], batch[:, 1:]

    def state_dict(self) -> dict:
        return {"generator": self.generator.get_state()}

    def load_state_dict(self, state: dict) -> None:
        self.generator.set_state(state["generator"])


class Prefetcher:
    """A sampler's batches made `depth` ahead by a background thread while the loop computes,
    in pinned memory when `pin` (a CUDA device copies them with `non_blocking=True`). The same
    batches in the same order as the sampler's own `next()`, whatever the depth (0: made on
    demand, no thread). `state_dict()` is the sampler's state after the last batch handed
    out, not after the last one made, so a checkpoint resumes at the loop's position."""

    def __init__(self, sampler, depth: int, pin: bool = False):
        self.sampler, self.depth, self.pin = sampler, depth, pin
        self._state: dict | None = None  # None: the sampler's own (nothing made ahead)
        self._queue: queue.Queue | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    def _make(self) -> tuple:
        batch = self.sampler.next()
        return tuple(t.pin_memory() for t in batch) if self.pin else batch

    def _fill(self) -> None:
        try:
            while not self._stop.is_set():
                item = (self._make(), self.sampler.state_dict())
                while not self._stop.is_set():
                    try:
                        self._queue.put(item, timeout=0.1)
                        break
                    except queue.Full:
                        continue
        except BaseException as e:  # raised again in the loop's thread by `next`
            self._queue.put((e, None))

    def next(self) -> tuple:
        if self.depth == 0:
            return self._make()
        if self._thread is None:
            self._stop.clear()
            self._queue = queue.Queue(self.depth)
            self._thread = threading.Thread(target=self._fill, name="prefetch", daemon=True)
            self._thread.start()
        batch, state = self._queue.get()
        if isinstance(batch, BaseException):
            self.close()
            raise batch
        self._state = state
        return batch

    def close(self) -> None:
        """Stop the thread and drop what it made ahead (the sampler is then at an unknown
        position: `load_state_dict` or `state_dict` first)."""
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join()
        self._thread = self._queue = None
        if self._state is not None:
            self.sampler.load_state_dict(self._state)  # back to the loop's position

    def state_dict(self) -> dict:
        return self.sampler.state_dict() if self._state is None else self._state

    def load_state_dict(self, state: dict) -> None:
        self.close()
        self.sampler.load_state_dict(state)
        self._state = None
