"""The encoder-only masked language model (BERT, Devlin et al. 2019).

Parameter names (the layout an exporter maps from):

- ``tok_emb.weight``, ``pos`` as in ``models.lm``; ``emb_norm``: a norm after the embeddings
  for Post-LN (BERT's), so every block input is normalised; Pre-LN has ``final_norm`` instead
  (Megatron-BERT's arrangement).
- ``blocks.{i}``: the self-attention blocks of ``models.lm``, bidirectional, padding masked.
- BERT's MLM head: ``mlm_transform`` (d_model -> d_model Linear, then exact GELU whatever the
  ``mlp`` axis, then ``mlm_norm``), and ``lm_head`` (the token table when ``tie_embeddings``,
  with a vocab-sized bias when ``bias``).

Initialisation as ``models.lm``; the head bias starts at 0.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from models.attention import with_key_padding
from models.block import init_weights
from models.config import ModelConfig
from models.loss import cross_entropy
from models.registry import NORMS, POSITIONS, build_block


class MaskedLM(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        post = cfg.norm_position == "post"
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.pos = POSITIONS[cfg.pos_encoding](cfg)
        self.emb_norm = NORMS[cfg.norm](cfg) if post else nn.Identity()
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(build_block(cfg, i) for i in range(cfg.n_layers))
        self.final_norm = nn.Identity() if post else NORMS[cfg.norm](cfg)
        self.mlm_transform = nn.Linear(cfg.d_model, cfg.d_model, bias=cfg.bias)
        self.mlm_norm = NORMS[cfg.norm](cfg)
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=cfg.bias)
        if cfg.tie_embeddings:
            self.lm_head.weight = self.tok_emb.weight
        init_weights(self, cfg.init_std, [self.blocks])

    def hidden(self, idx: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """idx (B, T), attention_mask (B, T) (1/True = token, 0 = padding) -> (B, T, d)."""
        h = self.tok_emb(idx)
        if self.cfg.scale_embeddings:
            h = h * math.sqrt(self.cfg.d_model)
        h = self.drop(self.emb_norm(self.pos.add_to_embeddings(h, 0)))
        pos = self.pos.attention_inputs(idx.shape[1], 0, idx.device, causal=False)
        pos = with_key_padding(pos, attention_mask)
        for block in self.blocks:
            h = block(h, pos)
        return self.final_norm(h)

    def forward(
        self,
        idx: torch.Tensor,
        targets: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        return_logits: bool = True,
    ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """idx (B, T) (masked) token ids -> logits (B, T, vocab) and, given targets (B, T) (the
        original ids at the selected positions, -100 elsewhere: ``training.corruption``), the
        mean cross-entropy over the selected positions. ``return_logits=False`` returns None
        for the logits (they are still computed at every position, as counted)."""
        h = self.mlm_norm(F.gelu(self.mlm_transform(self.hidden(idx, attention_mask))))
        logits = self.lm_head(h)
        loss = None
        if targets is not None:
            loss = cross_entropy(logits.view(-1, logits.shape[-1]), targets.reshape(-1))
        return (logits if return_logits or targets is None else None), loss
