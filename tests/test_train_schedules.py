"""Learning-rate schedules, the loop's cadence and batch geometry (pure functions)."""

from __future__ import annotations

import pytest

from training.config import ConfigError, TrainConfig
from training.schedules import Schedule, warmup_steps, wsd_decay_start
from training.step import batch_geometry
from training.trainer import every_n_steps


def test_warmup_fraction_or_steps():
    assert (
        warmup_steps(0.1, 200) == 20
        and warmup_steps(30, 200) == 30
        and warmup_steps(500, 200) == 200
    )


@pytest.mark.parametrize("kind", ["cosine", "wsd", "constant"])
def test_schedules_warm_up_then_end_where_expected(kind):
    s = Schedule(kind, total_steps=100, warmup_steps=10, min_lr_ratio=0.1, decay_start=80)
    m = [s.multiplier(i) for i in range(100)]
    assert m[0] == pytest.approx(0.1) and m[9] == pytest.approx(1.0)
    assert all(a <= b for a, b in zip(m[:10], m[1:10]))
    if kind == "constant":
        assert m[10:] == [1.0] * 90
    elif kind == "cosine":
        assert all(a >= b for a, b in zip(m[10:], m[11:])) and m[-1] == pytest.approx(0.1, abs=1e-3)
    else:
        assert m[10:80] == [1.0] * 70 and m[-1] == pytest.approx(0.1)
        assert all(a > b for a, b in zip(m[80:], m[81:]))


def test_wsd_decay_start_rules():
    assert wsd_decay_start(100, 0.2, 256) == 80
    assert wsd_decay_start(100, 0.0, 256) == 100  # stable run: never decays
    assert wsd_decay_start(100, 0.2, 256, branch_step=60) == 60  # branch decays from its point
    assert wsd_decay_start(100, 0.2, 256, decay_start_tokens=256 * 50) == 50


def test_every_n_steps_ends_periods_and_never_fires_for_zero():
    assert [s for s in range(1, 13) if every_n_steps(s, 4)] == [4, 8, 12]
    assert not any(every_n_steps(s, 0) for s in range(1, 13))  # checkpoint_every=0: off


def test_batch_geometry():
    tr = TrainConfig(tokens=10_000, batch_tokens=1024, seq_len=32, micro_batch=8)
    g = batch_geometry(tr, world_size=2)
    assert (g.micro_batch, g.grad_accum, g.total_steps) == (8, 2, 10)
    with pytest.raises(ConfigError, match="train.micro_batch"):
        batch_geometry(TrainConfig(batch_tokens=1024, seq_len=32, micro_batch=5), 1)


def test_compile_setting_auto_is_on_for_cuda_only():
    import torch

    from training.step import use_compile

    assert TrainConfig.from_dict({}).compile == "auto"
    assert TrainConfig.from_dict({"compile": True}).compile is True
    with pytest.raises(ConfigError, match="train.compile"):
        TrainConfig.from_dict({"compile": "yes"})
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert [use_compile("auto", cpu), use_compile("auto", cuda)] == [False, True]
    assert [use_compile(True, cpu), use_compile(False, cuda)] == [True, False]


def test_keep_host_memory_setting_auto_is_on_for_cpu_only():
    import torch

    from training.keys import run_key
    from training.step import use_keep_host_memory

    assert TrainConfig.from_dict({}).keep_host_memory == "auto"
    with pytest.raises(ConfigError, match="train.keep_host_memory"):
        TrainConfig.from_dict({"keep_host_memory": "sometimes"})
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert [use_keep_host_memory("auto", cpu), use_keep_host_memory("auto", cuda)] == [True, False]
    assert [use_keep_host_memory(False, cpu), use_keep_host_memory(True, cuda)] == [False, True]
    # An allocator setting does not change what is trained: same run, same key.
    cfg = {"train": {"tokens": 1000, "keep_host_memory": "auto"}}
    assert run_key(cfg) == run_key({"train": {"tokens": 1000, "keep_host_memory": False}})
