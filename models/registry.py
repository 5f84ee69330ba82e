"""Config strings -> classes. Keys equal the ``Literal`` choices in ``models.config`` (tested),
so the model code never branches on strings."""

from __future__ import annotations

from models.block import (
    Block,
    PostNormBlock,
    PostNormCrossBlock,
    PreNormBlock,
    PreNormCrossBlock,
)
from models.config import ModelConfig
from models.mlp import GeluMLP, SwiGLUMLP
from models.moe import MoEMLP
from models.norms import LayerNorm, RMSNorm
from models.positions import (
    AlibiPositions,
    LearnedPositions,
    NoPositions,
    RotaryPositions,
    SinusoidalPositions,
)

NORMS = {"layernorm": LayerNorm, "rmsnorm": RMSNorm}
MLPS = {"gelu": GeluMLP, "swiglu": SwiGLUMLP, "moe": MoEMLP}
POSITIONS = {
    "sinusoidal": SinusoidalPositions,
    "learned": LearnedPositions,
    "rope": RotaryPositions,
    "alibi": AlibiPositions,
    "none": NoPositions,
}
BLOCKS = {"pre": PreNormBlock, "post": PostNormBlock}
CROSS_BLOCKS = {"pre": PreNormCrossBlock, "post": PostNormCrossBlock}


def build_block(cfg: ModelConfig, layer_idx: int, cross: bool = False) -> Block:
    """The block ``cfg.norm_position`` names, with the norm and MLP classes the config names
    (the MLP of layer ``layer_idx``: a MoE model's dense layers use ``expert_mlp``);
    ``cross``: the encoder-decoder's decoder block (self-attention, cross-attention, MLP)."""
    blocks = CROSS_BLOCKS if cross else BLOCKS
    mlp = MLPS[cfg.layer_mlp(layer_idx)]
    return blocks[cfg.norm_position](cfg, layer_idx, NORMS[cfg.norm], mlp)
