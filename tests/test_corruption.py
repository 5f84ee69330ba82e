"""training.corruption: BERT masking statistics and T5 span corruption (round trip, lengths),
all seeded."""

from __future__ import annotations

import math

import pytest
import torch

from training.corruption import mask_tokens, reconstruct, shift_right, span_corruption

MASK, V = 0, 1000


def _masked(shape=(64, 4096), seed=0, **kw):
    tokens = torch.randint(1, V, shape, generator=torch.Generator().manual_seed(123))
    inputs, labels = mask_tokens(
        tokens, mask_id=MASK, vocab_size=V, generator=torch.Generator().manual_seed(seed), **kw
    )
    return tokens, inputs, labels


def _within(count: int, n: int, p: float, sigmas: float = 5.0) -> bool:
    return abs(count - n * p) <= sigmas * math.sqrt(n * p * (1 - p))


def test_bert_masking_statistics():
    tokens, inputs, labels = _masked()
    selected = labels != -100
    assert selected.sum(1).tolist() == [round(4096 * 0.15)] * 64  # BERT's count per sequence
    positions = selected.sum(0)  # every position equally likely: 64 * 0.15 per column
    assert abs(positions.float().mean() - 64 * 0.15) < 0.05
    assert _within(int((positions[:2048]).sum()), int(selected.sum()), 0.5)
    assert torch.equal(labels[selected], tokens[selected])  # labels: the original tokens
    assert torch.equal(inputs[~selected], tokens[~selected])  # the rest untouched
    k = int(selected.sum())
    masked = int((inputs[selected] == MASK).sum())
    kept = int((inputs[selected] == tokens[selected]).sum())
    # a random replacement equals the original with probability 1/V, and is MASK with 1/V
    assert _within(masked, k, 0.8 + 0.1 / V)
    assert _within(kept, k, 0.1 + 0.1 / V)
    assert _within(k - masked - kept, k, 0.1 * (1 - 2 / V))
    replaced = inputs[selected & (inputs != MASK) & (inputs != tokens)]
    bins = torch.bincount(replaced * 10 // V, minlength=10)  # random ids: uniform over [0, V)
    assert all(_within(int(c), len(replaced), 0.1) for c in bins)


def test_masking_is_seeded_and_respects_eligibility():
    _, a, la = _masked(shape=(4, 256), seed=5)
    _, b, lb = _masked(shape=(4, 256), seed=5)
    _, c, _ = _masked(shape=(4, 256), seed=6)
    assert torch.equal(a, b) and torch.equal(la, lb) and not torch.equal(a, c)
    eligible = torch.zeros(4, 256, dtype=torch.bool)
    eligible[:, :100] = True  # e.g. padding after position 100
    tokens, inputs, labels = _masked(shape=(4, 256), eligible=eligible)
    assert (labels[:, 100:] == -100).all() and torch.equal(inputs[:, 100:], tokens[:, 100:])
    assert (labels[:, :100] != -100).sum(1).tolist() == [15] * 4  # 15% of the eligible 100
    eligible[1] = False  # a row with nothing eligible selects nothing
    eligible[2, :3] = True  # round(15% of 3) = 0, but at least one
    eligible[2, 3:] = False
    _, _, labels = _masked(shape=(4, 256), eligible=eligible)
    assert (labels != -100).sum(1).tolist() == [15, 0, 1, 15]


@pytest.mark.parametrize(
    ("kw", "field"), [({"mask_prob": 0.0}, "mask_prob"), ({"mask_id": V}, "mask_id")]
)
def test_bad_masking_arguments_name_the_field(kw, field):
    tokens = torch.zeros(2, 8, dtype=torch.long)
    args = {"mask_id": MASK, "vocab_size": V, "generator": torch.Generator(), **kw}
    with pytest.raises(ValueError, match=field):
        mask_tokens(tokens, **args)


SENTINELS = list(range(V - 1, V - 101, -1))  # T5's order: the last ids, descending


@pytest.mark.parametrize("length", [2, 3, 10, 57, 128, 512])
def test_span_corruption_round_trip_and_lengths(length):
    for seed in range(20):
        tokens = torch.randint(0, V - 100, (length,), generator=torch.Generator().manual_seed(seed))
        g = torch.Generator().manual_seed(seed)
        inputs, targets = span_corruption(tokens, sentinel_ids=SENTINELS, generator=g)
        assert torch.equal(reconstruct(inputs, targets, SENTINELS), tokens)
        n_noise = min(max(round(length * 0.15), 1), length - 1)
        n_spans = min(max(round(n_noise / 3), 1), n_noise, length - n_noise)
        used = [t for t in targets.tolist() if t in SENTINELS]
        assert used == SENTINELS[:n_spans]  # one sentinel per span, in order
        assert len(targets) == n_noise + n_spans and len(inputs) == length - n_noise + n_spans
        assert inputs[0].item() not in SENTINELS  # T5 starts with a kept span


def test_spans_are_contiguous_and_average_three_tokens():
    sentinels = [-1 - i for i in range(100)]
    lengths = []
    for seed in range(50):
        g = torch.Generator().manual_seed(seed)
        _, targets = span_corruption(torch.arange(512), sentinel_ids=sentinels, generator=g)
        spans: list[list[int]] = []
        for t in targets.tolist():
            if t < 0:
                spans.append([])
            else:
                spans[-1].append(t)
        assert all(s == list(range(s[0], s[0] + len(s))) for s in spans)  # runs of the text
        lengths += [len(s) for s in spans]
    # 512 tokens: round(76.8) = 77 noise tokens in round(77 / 3) = 26 spans, lengths random
    assert sum(lengths) == 50 * 77 and len(lengths) == 50 * 26
    assert min(lengths) == 1 and max(lengths) >= 8


def test_span_corruption_bad_input():
    g = torch.Generator()
    with pytest.raises(ValueError, match="sentinel_ids"):
        span_corruption(torch.arange(100), sentinel_ids=[999], generator=g)
    with pytest.raises(ValueError, match="tokens"):
        span_corruption(torch.arange(1), sentinel_ids=SENTINELS, generator=g)
    with pytest.raises(ValueError, match="tokens"):
        span_corruption(torch.zeros(2, 8, dtype=torch.long), sentinel_ids=SENTINELS, generator=g)


def test_shift_right():
    targets = torch.tensor([[5, 6, 7], [8, -100, -100]])
    assert shift_right(targets, 1).tolist() == [[1, 5, 6], [1, 8, 1]]
