"""Normalisation layers, constructed from a ModelConfig."""

from __future__ import annotations

from torch import nn

from models.config import ModelConfig


class LayerNorm(nn.LayerNorm):
    """LayerNorm over d_model; gain init 1, bias (only if ``cfg.bias``) init 0."""

    def __init__(self, cfg: ModelConfig):
        super().__init__(cfg.d_model, eps=cfg.norm_eps, bias=cfg.bias)


class RMSNorm(nn.RMSNorm):
    """RMSNorm (Zhang & Sennrich 2019): x / rms(x) * gain, no bias, no mean subtraction."""

    def __init__(self, cfg: ModelConfig):
        super().__init__(cfg.d_model, eps=cfg.norm_eps)
