"""Batches made ahead (`training.data.Prefetcher`, `train.prefetch`): the same batches in the
same order whatever the depth, a checkpoint's data position is the loop's (not the thread's),
and a run interrupted and resumed with prefetching ends bit-identical to one without."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from train_helpers import compose

from training.data import BatchSampler, Prefetcher

pytestmark = pytest.mark.usefixtures("one_thread")

DEPTHS = [0, 1, 2, 5]


def tokens(n: int = 5000) -> np.ndarray:
    return np.random.default_rng(0).integers(0, 1000, n, dtype=np.uint16)


def draw(sampler, n: int) -> list[tuple[torch.Tensor, ...]]:
    return [tuple(t.clone() for t in sampler.next()) for _ in range(n)]


def same(a, b) -> bool:
    return len(a) == len(b) and all(
        torch.equal(x, y) for ba, bb in zip(a, b, strict=True) for x, y in zip(ba, bb, strict=True)
    )


@pytest.mark.parametrize("depth", DEPTHS)
def test_prefetched_batches_are_the_samplers_own(depth):
    plain = draw(BatchSampler(tokens(), 16, 4, seed=3), 12)
    ahead = Prefetcher(BatchSampler(tokens(), 16, 4, seed=3), depth)
    try:
        assert same(draw(ahead, 12), plain)
    finally:
        ahead.close()


def test_sampler_windows_are_the_token_array_shifted_by_one():
    data = tokens()
    x, y = BatchSampler(data, 16, 4, seed=0).next()
    assert x.dtype == y.dtype == torch.int64 and x.shape == y.shape == (4, 16)
    assert torch.equal(x[:, 1:], y[:, :-1])
    first = x[0].numpy()
    starts = [s for s in range(len(data) - 16) if np.array_equal(data[s : s + 16], first)]
    assert starts and np.array_equal(data[starts[0] + 1 : starts[0] + 17], y[0].numpy())


@pytest.mark.parametrize("depth", DEPTHS)
def test_state_is_the_loops_position_and_resumes_the_same_batches(depth):
    reference = BatchSampler(tokens(), 16, 4, seed=5)
    expected = draw(reference, 10)
    ahead = Prefetcher(BatchSampler(tokens(), 16, 4, seed=5), depth)
    draw(ahead, 4)  # the thread has made up to `depth` more by now
    state = ahead.state_dict()
    ahead.close()
    again = Prefetcher(BatchSampler(tokens(), 16, 4, seed=99), depth)
    again.load_state_dict(state)
    try:
        assert same(draw(again, 6), expected[4:])
    finally:
        again.close()


def test_closing_keeps_the_position_and_load_state_restarts_the_thread():
    expected = draw(BatchSampler(tokens(), 8, 2, seed=1), 9)
    ahead = Prefetcher(BatchSampler(tokens(), 8, 2, seed=1), 3)
    first = draw(ahead, 3)
    ahead.close()  # the sampler goes back to where the loop is
    second = draw(ahead, 3)  # and a new thread starts from there
    ahead.load_state_dict(ahead.state_dict())
    third = draw(ahead, 3)
    ahead.close()
    assert same(first + second + third, expected)


def test_an_error_in_the_thread_is_raised_in_the_loop():
    class Broken:
        def next(self):
            raise OSError("disk gone")

        def state_dict(self):
            return {}

        def load_state_dict(self, state):
            pass

    with pytest.raises(OSError, match="disk gone"):
        Prefetcher(Broken(), 2).next()


def test_pinned_batches_only_where_cuda_is(monkeypatch):
    if torch.cuda.is_available():
        batch = Prefetcher(BatchSampler(tokens(), 8, 2, seed=0), 2, pin=True)
        assert all(t.is_pinned() for t in batch.next())
        batch.close()
    else:  # nothing to pin into without a CUDA runtime: the trainer asks for pinning on CUDA only
        batch = Prefetcher(BatchSampler(tokens(), 8, 2, seed=0), 2, pin=False)
        assert not any(t.is_pinned() for t in batch.next())
        batch.close()


def test_run_interrupted_and_resumed_with_prefetch_matches_one_without(lab, tmp_path, monkeypatch):
    """Prefetching 3 ahead, stopped after its step-8 checkpoint with batches made for steps
    past it, then resumed: the same final losses and RNG state as an uninterrupted run that
    makes every batch on demand."""
    from training.checkpoint import load_checkpoint
    from training.train import train
    from training.trainer import Trainer

    run = [
        *lab,
        "train.tokens=4096",
        "train.checkpoint_every=8",
        "train.eval_every=100",
    ]  # 16 steps
    real_step, calls = Trainer.take_step, {"n": 0}

    def stop_at_step_12(*args):
        calls["n"] += 1
        if calls["n"] == 12:
            raise KeyboardInterrupt
        return real_step(*args)

    monkeypatch.setattr(Trainer, "take_step", staticmethod(stop_at_step_12))
    with pytest.raises(KeyboardInterrupt):
        train(compose(*run, "train.prefetch=3"))
    monkeypatch.setattr(Trainer, "take_step", staticmethod(real_step))
    (last,) = (tmp_path / "runs").glob("*/last.pt")
    assert load_checkpoint(last)["step"] == 8
    resumed = train(compose(*run, "train.prefetch=3"))
    clean = [*run, "tracking.experiment=on-demand", f"paths.runs_dir={tmp_path / 'c'}"]
    on_demand = train(compose(*clean, "train.prefetch=0"))
    assert resumed.steps == on_demand.steps == 16
    assert resumed.final_train_loss == on_demand.final_train_loss
    assert resumed.final_val_loss == on_demand.final_val_loss
    a, b = load_checkpoint(last), load_checkpoint(next((tmp_path / "c").glob("*/last.pt")))
    assert torch.equal(a["sampler"]["generator"], b["sampler"]["generator"])
    assert torch.equal(a["torch_rng"], b["torch_rng"])
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in b["model"])
