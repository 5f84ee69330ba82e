"""The input corruption of the non-decoder families' objectives, as pure functions of token ids.

- ``mask_tokens``: BERT's masked LM (Devlin et al. 2019, sec. 3.1): in each row,
  ``max(1, round(15% x its eligible positions))`` of them, uniformly at random, are selected
  (a fixed count per sequence, as BERT's ``create_pretraining_data.py``, not an independent
  coin per position); a selected token becomes ``mask_id`` with probability 80%, a uniformly
  random token with 10%, and stays itself with 10%. Labels hold the original token at the
  selected positions and -100 elsewhere, so ``MaskedLM``'s loss covers the selected tokens only
  (all three kinds, as in BERT). The fixed count makes every row weigh the same in a batch's
  per-token mean: the mean of ranks' (or micro-batches') means is the global batch's mean.
- ``span_corruption``: T5's objective (Raffel et al. 2020, sec. 3.1.4): 15% of a sequence's
  tokens, in spans of mean length 3, are each replaced in the input by one sentinel token; the
  target lists every sentinel followed by the tokens it hid. ``reconstruct`` inverts it.
- ``shift_right``: the decoder input for a target (teacher forcing behind a start token).

Every random draw comes from the caller's ``torch.Generator``, so a seed fixes the batch. The
special ids (mask, sentinels, start, padding) are the caller's: they must lie outside the
tokenizer's ids, in a vocabulary enlarged to hold them.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

IGNORE_INDEX = -100


def mask_tokens(
    tokens: torch.Tensor,
    *,
    mask_id: int,
    vocab_size: int,
    generator: torch.Generator,
    mask_prob: float = 0.15,
    eligible: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """tokens (B, T) -> (inputs, labels), both (B, T); see the module docstring.

    ``eligible`` (B, T) bool marks the positions that may be selected (False for padding or
    other special tokens); default every position. A row selects
    ``min(n, max(1, round(mask_prob * n)))`` of its ``n`` eligible positions (none if it has
    none). Random replacements are uniform over ``[0, vocab_size)``."""
    if not 0.0 < mask_prob < 1.0:
        raise ValueError(f"mask_prob must be in (0, 1), got {mask_prob!r}")
    if not 0 <= mask_id < vocab_size:
        raise ValueError(f"mask_id must be in [0, vocab_size={vocab_size}), got {mask_id!r}")
    shape, device = tokens.shape, tokens.device
    keys = torch.rand(shape, generator=generator, device=device)  # the smallest k are selected
    eligible = torch.ones(shape, dtype=torch.bool, device=device) if eligible is None else eligible
    keys = torch.where(eligible.bool(), keys, 2.0)  # ineligible positions sort last
    n = eligible.bool().sum(-1, keepdim=True)
    count = torch.minimum(torch.round(n * mask_prob).clamp(min=1), n)
    order = keys.argsort(-1).argsort(-1)  # each position's place in its row's random order
    selected = order < count
    labels = torch.where(selected, tokens, IGNORE_INDEX)
    kind = torch.rand(shape, generator=generator, device=device)  # < .8 mask, < .9 random
    random_ids = torch.randint(vocab_size, shape, generator=generator, device=device)
    inputs = torch.where(selected & (kind < 0.8), mask_id, tokens)
    inputs = torch.where(selected & (kind >= 0.8) & (kind < 0.9), random_ids, inputs)
    return inputs, labels


def _split(n: int, parts: int, generator: torch.Generator) -> list[int]:
    """A uniformly random composition of n into ``parts`` positive lengths."""
    cuts = (torch.randperm(n - 1, generator=generator)[: parts - 1] + 1).sort().values.tolist()
    bounds = [0, *cuts, n]
    return [b - a for a, b in zip(bounds[:-1], bounds[1:])]


def span_corruption(
    tokens: torch.Tensor,
    *,
    sentinel_ids: Sequence[int],
    generator: torch.Generator,
    noise_density: float = 0.15,
    mean_span: float = 3.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """tokens (T,) -> (inputs, targets), 1-D. As T5's ``random_spans_noise_mask``:
    round(T * noise_density) noise tokens in round(noise / mean_span) spans (at least 1), noise
    and kept lengths each a random composition, kept and noise spans alternating from a kept
    one. inputs: the kept tokens with span i replaced by ``sentinel_ids[i]``; targets:
    ``sentinel_ids[i]`` then span i's tokens, for every span."""
    if tokens.ndim != 1:
        raise ValueError(f"tokens must be 1-D (one sequence), got shape {tuple(tokens.shape)}")
    if not 0.0 < noise_density < 1.0:
        raise ValueError(f"noise_density must be in (0, 1), got {noise_density!r}")
    if not mean_span >= 1.0:
        raise ValueError(f"mean_span must be >= 1, got {mean_span!r}")
    length = tokens.shape[0]
    if length < 2:
        raise ValueError(f"tokens: span corruption needs at least 2 tokens, got {length}")
    n_noise = min(max(round(length * noise_density), 1), length - 1)
    n_spans = max(round(n_noise / mean_span), 1)
    n_spans = min(n_spans, n_noise, length - n_noise)
    if n_spans > len(sentinel_ids):
        raise ValueError(
            f"sentinel_ids: {n_spans} spans need {n_spans} sentinels, got {len(sentinel_ids)}"
        )
    noise_lengths = _split(n_noise, n_spans, generator)
    kept_lengths = _split(length - n_noise, n_spans, generator)
    inputs: list[torch.Tensor] = []
    targets: list[torch.Tensor] = []
    start = 0
    for i, (kept, noise) in enumerate(zip(kept_lengths, noise_lengths)):
        sentinel = tokens.new_tensor([sentinel_ids[i]])
        inputs += [tokens[start : start + kept], sentinel]
        targets += [sentinel, tokens[start + kept : start + kept + noise]]
        start += kept + noise
    return torch.cat(inputs), torch.cat(targets)


def reconstruct(
    inputs: torch.Tensor, targets: torch.Tensor, sentinel_ids: Sequence[int]
) -> torch.Tensor:
    """The original sequence from ``span_corruption``'s inputs and targets."""
    sentinels = set(sentinel_ids)
    spans: dict[int, list[int]] = {}
    current = None
    for t in targets.tolist():
        if t in sentinels:
            current = spans.setdefault(t, [])
        elif current is not None:
            current.append(t)
    out: list[int] = []
    for t in inputs.tolist():
        out.extend(spans.get(t, []) if t in sentinels else [t])
    return inputs.new_tensor(out)


def shift_right(targets: torch.Tensor, start_id: int) -> torch.Tensor:
    """(B, T) targets -> (B, T) decoder inputs: ``start_id`` then targets[:, :-1]. Label
    padding (-100) in the shifted part becomes ``start_id``, which no loss reads."""
    start = torch.full_like(targets[:, :1], start_id)
    shifted = torch.cat([start, targets[:, :-1]], dim=1)
    return shifted.masked_fill(shifted == IGNORE_INDEX, start_id)
