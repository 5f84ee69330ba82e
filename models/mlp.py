"""Position-wise feed-forward layers. Both end in a residual output projection ``proj``."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from models.config import ModelConfig


class GeluMLP(nn.Module):
    """``proj(gelu(fc(x)))`` with exact (erf) GELU; fc: d_model -> ffn_dim."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.fc = nn.Linear(cfg.d_model, cfg.ffn_dim, bias=cfg.bias)
        self.proj = nn.Linear(cfg.ffn_dim, cfg.d_model, bias=cfg.bias)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(self.proj(F.gelu(self.fc(x))))


class SwiGLUMLP(nn.Module):
    """``proj(silu(gate(x)) * up(x))`` (Shazeer 2020).

    Gate and up projections are fused into one Linear ``gate_up`` for speed: its weight is
    (2 * ffn_dim, d_model) with rows ``[:ffn_dim]`` = gate and ``[ffn_dim:]`` = up
    (Hugging Face Llama's ``gate_proj`` and ``up_proj`` in that order).
    """

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.gate_up = nn.Linear(cfg.d_model, 2 * cfg.ffn_dim, bias=cfg.bias)
        self.proj = nn.Linear(cfg.ffn_dim, cfg.d_model, bias=cfg.bias)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up(x).chunk(2, dim=-1)  # (B, T, ffn_dim) each
        return self.drop(self.proj(F.silu(gate) * up))
