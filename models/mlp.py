"""Position-wise feed-forward layers. Both end in a residual output projection ``proj``.

``d_ff`` and ``bias`` default to the config's (``ffn_dim``, ``bias``); the MoE layer builds its
shared experts from these classes with its own width and no biases."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from models.config import ModelConfig


class GeluMLP(nn.Module):
    """``proj(gelu(fc(x)))`` with exact (erf) GELU; fc: d_model -> ffn_dim."""

    def __init__(self, cfg: ModelConfig, d_ff: int | None = None, bias: bool | None = None):
        super().__init__()
        f, b = d_ff or cfg.ffn_dim, cfg.bias if bias is None else bias
        self.fc = nn.Linear(cfg.d_model, f, bias=b)
        self.proj = nn.Linear(f, cfg.d_model, bias=b)
        self.drop = nn.Dropout(cfg.dropout)

    def residual_projections(self) -> list[nn.Module]:
        return [self.proj]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(self.proj(F.gelu(self.fc(x))))


class SwiGLUMLP(nn.Module):
    """``proj(silu(gate(x)) * up(x))`` (Shazeer 2020).

    Gate and up projections are fused into one Linear ``gate_up`` for speed: its weight is
    (2 * ffn_dim, d_model) with rows ``[:ffn_dim]`` = gate and ``[ffn_dim:]`` = up
    (Hugging Face Llama's ``gate_proj`` and ``up_proj`` in that order).
    """

    def __init__(self, cfg: ModelConfig, d_ff: int | None = None, bias: bool | None = None):
        super().__init__()
        f, b = d_ff or cfg.ffn_dim, cfg.bias if bias is None else bias
        self.gate_up = nn.Linear(cfg.d_model, 2 * f, bias=b)
        self.proj = nn.Linear(f, cfg.d_model, bias=b)
        self.drop = nn.Dropout(cfg.dropout)

    def residual_projections(self) -> list[nn.Module]:
        return [self.proj]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up(x).chunk(2, dim=-1)  # (B, T, d_ff) each
        return self.drop(self.proj(F.silu(gate) * up))
