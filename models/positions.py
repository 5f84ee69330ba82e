"""Position encodings. Each class offers two hooks that the LM calls once per forward:

- ``add_to_embeddings(h, start)``: absolute encodings (sinusoidal, learned) add a (T, d_model)
  table slice to the token embeddings; the others return ``h`` unchanged.
- ``attention_inputs(T, start, device, causal)``: what every self-attention layer needs for
  queries at positions ``start .. start+T-1`` attending keys ``0 .. start+T-1``: RoPE cos/sin,
  an additive/boolean mask (ALiBi bias, or the causal mask of a multi-token chunk after a KV
  cache), and whether SDPA may use ``is_causal=True`` (no mask materialised: the training fast
  path). ``causal=False`` (encoders, ``start`` 0) lets every query see every key; ALiBi's
  penalty is then symmetric, ``-slope * |i - j|``.

Cross-attention (encoder-decoder) takes no position inputs: RoPE and ALiBi act on
self-attention only, and absolute encodings reach it through the embeddings.

Everything that can be precomputed (tables, cos/sin, ALiBi relative distances) is a
non-persistent buffer, so checkpoints hold only learned weights.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import nn

from models.config import ModelConfig


class AttnInputs(NamedTuple):
    cos: torch.Tensor | None = None  # (T, head_dim) RoPE
    sin: torch.Tensor | None = None  # (T, head_dim) RoPE
    mask: torch.Tensor | None = None  # (n_heads or 1, T, S): float bias or bool keep-mask
    is_causal: bool = False  # SDPA is_causal (only with mask None and no cached prefix)


def _plain_causal(T: int, start: int, device: torch.device) -> AttnInputs:
    if start == 0:
        return AttnInputs(is_causal=T > 1)
    if T == 1:  # one new query sees every cached key: no mask needed
        return AttnInputs()
    q_pos = torch.arange(start, start + T, device=device)[:, None]
    k_pos = torch.arange(start + T, device=device)[None, :]
    return AttnInputs(mask=(k_pos <= q_pos)[None])  # (1, T, S) True = attend


class PositionEncoding(nn.Module):
    """Base: no position information (NoPE); causal attention only."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.max_seq_len = cfg.max_seq_len

    def add_to_embeddings(self, h: torch.Tensor, start: int) -> torch.Tensor:
        return h

    def attention_inputs(
        self, T: int, start: int, device: torch.device, causal: bool = True
    ) -> AttnInputs:
        return _plain_causal(T, start, device) if causal else AttnInputs()


class NoPositions(PositionEncoding):
    """``none``: NoPE, the causal mask is the only source of order."""


class _AbsolutePositions(PositionEncoding):
    name = ""

    def _check_length(self, end: int) -> None:
        if end > self.max_seq_len:
            raise ValueError(
                f"sequence length {end} exceeds max_seq_len ({self.max_seq_len}) with "
                f"pos_encoding={self.name!r}; raise max_seq_len or use rope/alibi/none"
            )


def sinusoidal_table(n_positions: int, d_model: int) -> torch.Tensor:
    """Vaswani et al. 2017: PE[p, 2i] = sin(p / 10000^(2i/d)), PE[p, 2i+1] = cos(same)."""
    pos = torch.arange(n_positions, dtype=torch.float64)[:, None]
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)
    angle = pos / torch.pow(10000.0, two_i / d_model)  # (P, ceil(d/2))
    table = torch.zeros(n_positions, d_model, dtype=torch.float64)
    table[:, 0::2] = torch.sin(angle)
    table[:, 1::2] = torch.cos(angle[:, : d_model // 2])
    return table.float()


class SinusoidalPositions(_AbsolutePositions):
    """``sinusoidal``: fixed table added to token embeddings (a buffer, not a parameter)."""

    name = "sinusoidal"

    def __init__(self, cfg: ModelConfig):
        super().__init__(cfg)
        table = sinusoidal_table(cfg.max_seq_len, cfg.d_model)
        self.register_buffer("table", table, persistent=False)  # (max_seq_len, d_model)

    def add_to_embeddings(self, h: torch.Tensor, start: int) -> torch.Tensor:
        self._check_length(start + h.shape[1])
        return h + self.table[start : start + h.shape[1]]


class LearnedPositions(_AbsolutePositions):
    """``learned``: absolute embedding table ``table.weight`` (max_seq_len, d_model), GPT-2 style."""

    name = "learned"

    def __init__(self, cfg: ModelConfig):
        super().__init__(cfg)
        self.table = nn.Embedding(cfg.max_seq_len, cfg.d_model)

    def add_to_embeddings(self, h: torch.Tensor, start: int) -> torch.Tensor:
        self._check_length(start + h.shape[1])
        return h + self.table.weight[start : start + h.shape[1]]


def rope_cos_sin(n_positions: int, head_dim: int, base: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and signed sin, each (P, head_dim), in the "rotate half" layout of GPT-NeoX and HF
    Llama: dimension i pairs with i + head_dim/2, both rotating at base^(-2i/head_dim).
    The sin table's first half is negated so that ``apply_rope`` needs no negation."""
    inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    angle = torch.outer(torch.arange(n_positions, dtype=torch.float32), inv_freq)  # (P, hd/2)
    cos, sin = angle.cos(), angle.sin()
    return torch.cat([cos, cos], dim=-1), torch.cat([-sin, sin], dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor) -> torch.Tensor:
    """Rotate (..., T, hd) queries or keys by their positions' angles; cos/signed_sin (T, hd).

    out = x * cos + [x2, x1] * [-sin, sin] for x = [x1, x2]: the usual rotate-half formula,
    written as flip + addcmul, faster on CPU than cat([-x2, x1]) (docs/performance.md).
    """
    swapped = x.unflatten(-1, (2, -1)).flip(-2).flatten(-2)  # [x2, x1]
    # in x's dtype: fp32 tables would promote bf16 q and k, and attention would run in fp32
    cos, signed_sin = cos.to(x.dtype), signed_sin.to(x.dtype)
    return torch.addcmul(x * cos, swapped, signed_sin)


class RotaryPositions(PositionEncoding):
    """``rope`` (Su et al. 2021): rotate q and k so q.k depends only on the position offset.
    Sequences beyond max_seq_len are allowed: the cos/sin cache grows on demand."""

    def __init__(self, cfg: ModelConfig):
        super().__init__(cfg)
        self.head_dim, self.base = cfg.head_dim, cfg.rope_base
        cos, sin = rope_cos_sin(cfg.max_seq_len, cfg.head_dim, cfg.rope_base)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    def attention_inputs(
        self, T: int, start: int, device: torch.device, causal: bool = True
    ) -> AttnInputs:
        if start + T > self.cos.shape[0]:  # rare: extrapolating past max_seq_len
            cos, sin = rope_cos_sin(2 * (start + T), self.head_dim, self.base)
            self.cos, self.sin = cos.to(self.cos.device), sin.to(self.sin.device)
        cos, sin = self.cos[start : start + T], self.sin[start : start + T]
        mask = _plain_causal(T, start, device) if causal else AttnInputs()
        return mask._replace(cos=cos, sin=sin)


def alibi_slopes(n_heads: int) -> torch.Tensor:
    """Press et al. 2022: geometric slopes 2^(-8/n), 2^(-16/n), ...; for n not a power of 2,
    the slopes of the nearest lower power of 2 plus every other slope of the next one."""

    def power_of_2(n: int) -> list[float]:
        return [2.0 ** (-8.0 * (i + 1) / n) for i in range(n)]

    if math.log2(n_heads).is_integer():
        return torch.tensor(power_of_2(n_heads))
    lower = 2 ** math.floor(math.log2(n_heads))
    extra = power_of_2(2 * lower)[0::2][: n_heads - lower]
    return torch.tensor(power_of_2(lower) + extra)


def _alibi_distances(n: int) -> torch.Tensor:
    """(n, n): key_pos - query_pos (<= 0) on and below the diagonal, -inf above (causal)."""
    pos = torch.arange(n, dtype=torch.float32)
    rel = pos[None, :] - pos[:, None]
    return rel.masked_fill(rel > 0, float("-inf"))


class AlibiPositions(PositionEncoding):
    """``alibi``: per-head linear distance penalty added to attention scores; causal -inf
    is folded into the same float bias. Sequences beyond max_seq_len are allowed."""

    def __init__(self, cfg: ModelConfig):
        super().__init__(cfg)
        self.register_buffer("slopes", alibi_slopes(cfg.n_heads), persistent=False)
        self.register_buffer("distances", _alibi_distances(cfg.max_seq_len), persistent=False)

    def attention_inputs(
        self, T: int, start: int, device: torch.device, causal: bool = True
    ) -> AttnInputs:
        if not causal:  # bidirectional: symmetric penalty
            pos = torch.arange(start, start + T, device=device, dtype=torch.float32)
            rel = -(pos[None, :] - pos[:, None]).abs()  # (T, T)
            return AttnInputs(mask=self.slopes[:, None, None] * rel)  # (H, T, T)
        if start + T > self.distances.shape[0]:  # rare: extrapolating past max_seq_len
            self.distances = _alibi_distances(2 * (start + T)).to(self.distances.device)
        rel = self.distances[start : start + T, : start + T]  # (T, S)
        return AttnInputs(mask=self.slopes[:, None, None] * rel)  # (H, T, S)
