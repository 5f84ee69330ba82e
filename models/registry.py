"""Config strings -> classes. Keys equal the ``Literal`` choices in ``models.config`` (tested),
so the model code never branches on strings."""

from __future__ import annotations

from models.block import Block, PostNormBlock, PreNormBlock
from models.config import ModelConfig
from models.mlp import GeluMLP, SwiGLUMLP
from models.norms import LayerNorm, RMSNorm
from models.positions import (
    AlibiPositions,
    LearnedPositions,
    NoPositions,
    RotaryPositions,
    SinusoidalPositions,
)

NORMS = {"layernorm": LayerNorm, "rmsnorm": RMSNorm}
MLPS = {"gelu": GeluMLP, "swiglu": SwiGLUMLP}
POSITIONS = {
    "sinusoidal": SinusoidalPositions,
    "learned": LearnedPositions,
    "rope": RotaryPositions,
    "alibi": AlibiPositions,
    "none": NoPositions,
}
BLOCKS = {"pre": PreNormBlock, "post": PostNormBlock}


def build_block(cfg: ModelConfig, layer_idx: int) -> Block:
    """The block ``cfg.norm_position`` names, with the norm and MLP classes the config names."""
    return BLOCKS[cfg.norm_position](cfg, layer_idx, NORMS[cfg.norm], MLPS[cfg.mlp])
