"""Transformer blocks. Pre-LN and Post-LN differ only in where the norms sit, so they are two
tiny subclasses of one module holding the same four sublayers. A cross block (the 2017
decoder's) adds cross-attention over the encoder output between self-attention and MLP, with
its own norm (Post-LN: a norm after each of the three sublayers).

``init_weights`` initialises a model of blocks (every family), see ``models.lm``."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn

from models.attention import CrossAttention, KVCache, SelfAttention
from models.config import ModelConfig
from models.positions import AttnInputs


class Block(nn.Module):
    """``norm`` and ``mlp`` are the classes the config names, passed in by the caller (see
    ``models.registry.build_block``) so that this module needs no registry."""

    residual_sublayers = 2  # attention, MLP: the k of init_weights' init_std / sqrt(k L)

    def __init__(
        self, cfg: ModelConfig, layer_idx: int, norm: type[nn.Module], mlp: type[nn.Module]
    ):
        super().__init__()
        self.attn_norm = norm(cfg)
        self.attn = SelfAttention(cfg, layer_idx)
        self.mlp_norm = norm(cfg)
        self.mlp = mlp(cfg)
        # CompleteP's (L / L0)^-alpha on every residual branch; 1 (skipped) under SP and muP.
        self.branch_mult = cfg.branch_mult

    def branch(self, y: torch.Tensor) -> torch.Tensor:
        """A residual branch's output as the stream receives it."""
        return y if self.branch_mult == 1.0 else y * self.branch_mult

    def residual_projections(self) -> list[nn.Module]:
        """The projections that write into the residual stream (each has a ``weight``): one
        per residual sublayer, the MoE MLP's routed and shared experts' both."""
        return [self.attn.proj, *self.mlp.residual_projections()]


class PreNormBlock(Block):
    """``x = x + F(LN(x))`` for F = attention, then MLP (GPT-2, Llama). Needs a final norm."""

    def forward(self, x: torch.Tensor, pos: AttnInputs, cache: KVCache | None = None):
        x = x + self.branch(self.attn(self.attn_norm(x), pos, cache))
        return x + self.branch(self.mlp(self.mlp_norm(x)))


class PostNormBlock(Block):
    """``x = LN(x + F(x))``: the classic Post-LN of Vaswani et al. 2017, exactly that."""

    def forward(self, x: torch.Tensor, pos: AttnInputs, cache: KVCache | None = None):
        x = self.attn_norm(x + self.attn(x, pos, cache))
        return self.mlp_norm(x + self.mlp(x))


class CrossBlock(Block):
    residual_sublayers = 3

    def __init__(
        self, cfg: ModelConfig, layer_idx: int, norm: type[nn.Module], mlp: type[nn.Module]
    ):
        super().__init__(cfg, layer_idx, norm, mlp)
        self.cross_norm = norm(cfg)
        self.cross_attn = CrossAttention(cfg)

    def residual_projections(self) -> list[nn.Module]:
        return [self.attn.proj, self.cross_attn.proj, *self.mlp.residual_projections()]


KV = tuple[torch.Tensor, torch.Tensor]


class PreNormCrossBlock(CrossBlock):
    """``x = x + F(LN(x))`` for F = causal self-attention, cross-attention, MLP."""

    def forward(self, x, pos: AttnInputs, memory_kv: KV, memory_mask, cache: KVCache | None = None):
        x = x + self.attn(self.attn_norm(x), pos, cache)
        x = x + self.cross_attn(self.cross_norm(x), memory_kv, memory_mask)
        return x + self.mlp(self.mlp_norm(x))


class PostNormCrossBlock(CrossBlock):
    """``x = LN(x + F(x))`` after each of the three sublayers (Vaswani et al. 2017)."""

    def forward(self, x, pos: AttnInputs, memory_kv: KV, memory_mask, cache: KVCache | None = None):
        x = self.attn_norm(x + self.attn(x, pos, cache))
        x = self.cross_norm(x + self.cross_attn(x, memory_kv, memory_mask))
        return self.mlp_norm(x + self.mlp(x))


@torch.no_grad()
def init_weights(model: nn.Module, init_std: float, stacks: Sequence[Sequence[Block]]) -> None:
    """Every Linear and Embedding weight of ``model`` ~ N(0, init_std), biases 0 (norms keep
    their gains of 1); then the residual projections of each stack of L blocks with k residual
    sublayers each ~ N(0, init_std / sqrt(k L)) (GPT-2), so that the residual stream's variance
    does not grow with depth."""
    for module in model.modules():
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=init_std)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)
    for stack in stacks:
        for block in stack:
            std = init_std / math.sqrt(block.residual_sublayers * len(stack))
            for proj in block.residual_projections():
                nn.init.normal_(proj.weight, std=std)
