"""The decoder-only causal language model, and ``build_model`` for every family.

Parameter names (the layout an exporter maps from):

- ``tok_emb.weight`` (vocab_size, d_model); ``lm_head.weight`` is the same tensor when
  ``tie_embeddings`` (the state dict then holds both names, sharing storage).
- ``pos.table.weight`` (max_seq_len, d_model) for learned positions only; sinusoidal, RoPE and
  ALiBi tables are non-persistent buffers.
- ``blocks.{i}.attn_norm``, ``blocks.{i}.attn.qkv`` (fused, see ``SelfAttention``),
  ``blocks.{i}.attn.proj``, ``blocks.{i}.mlp_norm``, ``blocks.{i}.mlp.fc`` / ``.proj`` (GELU) or
  ``blocks.{i}.mlp.gate_up`` (fused, see ``SwiGLUMLP``) / ``.proj``.
- ``final_norm`` (Pre-LN only; Post-LN blocks already end in a norm), ``lm_head`` (no bias).

Initialisation (``models.block.init_weights``, every family): every Linear and Embedding
weight ~ N(0, init_std); the residual output projections (``attn.proj``, ``mlp.proj``) ~
N(0, init_std / sqrt(2 * n_layers)) (GPT-2) so the residual stream's variance does not grow
with depth; biases 0; norm gains 1.

muP (``parametrization: mup``, Yang et al. 2022, Tensor Programs V, table 3 for Adam), with
m = ``cfg.width_mult`` = d_model / mup_base_width. Hidden matrices (both dimensions grow with
width: ``hidden_weights``) start at the SP std / sqrt(m), i.e. variance ~ 1/fan_in, equal to SP
at the base width. Embeddings, biases and gains (one or no dimension grows) keep SP's init. The
readout is zero-initialised (untied head, as ``mup.MuReadout(readout_zero_init=True)``) and
sees the final hidden state times 1/m (the output multiplier); attention logits are scaled by
1/head_dim (``models.attention``). The per-layer Adam rule (hidden matrices' lr / m, the rest
unchanged) is the optimizer's: ``training.step.param_groups``.

CompleteP (``parametrization: completep``; Dey et al. 2025, "Don't be lazy: CompleteP enables
compute-efficient deep transformers", arXiv 2505.01618, table 1 for a Pre-LN Transformer and
AdamW) is muP above plus rules in the depth multiplier m_L = ``cfg.depth_mult`` = n_layers /
mup_base_depth, with alpha = ``cfg.depth_alpha`` (1: CompleteP; 0.5: the depth-muP of Yang et
al. 2023 and Bordelon et al. 2023):

- forward: every residual branch is multiplied by m_L^-alpha, ``x + m_L^-alpha F(LN(x))``
  (table 1, "MHA/MLP Residual"; ``models.block.Block.branch``);
- init: hidden weights keep muP's variance, independent of depth (table 1, "Hidden Init.
  Var."): the residual projections keep the base model's GPT-2 std init_std / sqrt(2 L0) /
  sqrt(m_N) at every depth instead of shrinking as 1/sqrt(2 L), since the branch multiplier now
  does the depth scaling;
- AdamW, in ``training.step.param_groups`` (table 1): hidden weights lr x m_N^-1 m_L^(alpha-1),
  weight decay x m_N (muP's); the blocks' norm gains and biases lr x m_L^(alpha-1); epsilon x
  m_L^-alpha for every parameter inside the residual blocks; embeddings, head and the final norm
  keep the base lr and epsilon. Table 1 also scales the blocks' epsilon by m_N^-1: this
  project's muP keeps one epsilon, and CompleteP here adds only the depth factor, so that at
  the base depth (m_L = 1) CompleteP is exactly muP (the same init, forward, optimizer groups,
  losses).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from models.attention import KVCache
from models.block import init_weights
from models.config import ModelConfig
from models.loss import cross_entropy, linear_cross_entropy
from models.mlm import MaskedLM
from models.registry import NORMS, POSITIONS, build_block
from models.sampling import next_token
from models.seq2seq import EncoderDecoderLM


class TransformerLM(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.pos = POSITIONS[cfg.pos_encoding](cfg)
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(build_block(cfg, i) for i in range(cfg.n_layers))
        self.final_norm = NORMS[cfg.norm](cfg) if cfg.norm_position == "pre" else nn.Identity()
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        if cfg.tie_embeddings:
            self.lm_head.weight = self.tok_emb.weight
        # muP's output multiplier 1/width_mult on the readout's input (1 under SP: skipped).
        self.readout_mult = 1.0 / cfg.width_mult
        init_weights(self, cfg.init_std, [self.blocks])
        if cfg.parametrization != "sp":
            self._init_mup()

    def hidden_weights(self) -> list[nn.Parameter]:
        """The matrix-like weights (fan-in and fan-out both grow with d_model): every Linear
        weight inside the blocks. Embeddings and the head have one fixed dimension (vocab)."""
        return [m.weight for m in self.blocks.modules() if isinstance(m, nn.Linear)]

    @torch.no_grad()
    def _init_mup(self) -> None:
        for w in self.hidden_weights():
            w.mul_(1.0 / math.sqrt(self.cfg.width_mult))  # variance ~ 1/fan_in
        if self.cfg.depth_mult != 1.0:  # CompleteP: the base depth's 1/sqrt(2 L0), not 1/sqrt(2 L)
            for block in self.blocks:
                for proj in block.residual_projections():
                    proj.weight.mul_(math.sqrt(self.cfg.depth_mult))
        if not self.cfg.tie_embeddings:
            nn.init.zeros_(self.lm_head.weight)

    def _trunk(self, idx: torch.Tensor, cache: KVCache | None) -> torch.Tensor:
        T = idx.shape[1]
        start = 0 if cache is None else cache.length
        h = self.tok_emb(idx)  # (B, T, d)
        if self.cfg.scale_embeddings:
            h = h * math.sqrt(self.cfg.d_model)
        h = self.pos.add_to_embeddings(h, start)
        h = self.drop(h)
        pos = self.pos.attention_inputs(T, start, idx.device)  # shared by every layer
        for block in self.blocks:
            h = block(h, pos, cache)
        h = self.final_norm(h)
        return h if self.readout_mult == 1.0 else h * self.readout_mult  # (B, T, d)

    def forward(
        self, idx: torch.Tensor, targets: torch.Tensor | None = None, return_logits: bool = True
    ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """idx (B, T) token ids -> logits (B, T, vocab_size) and, given targets (B, T), the mean
        next-token cross-entropy (targets == -100 are ignored); loss is None without targets.

        ``return_logits=False`` with targets (training and evaluation): the loss comes from the
        hidden states in chunks (``linear_cross_entropy``), no logits are materialised, and the
        logits returned are None. Same loss and gradients up to float rounding."""
        h = self._trunk(idx, None)  # (B, T, d)
        if targets is not None and not return_logits:
            loss = linear_cross_entropy(h.flatten(0, 1), self.lm_head.weight, targets.reshape(-1))
            return None, loss
        logits = self.lm_head(h)
        if targets is None:
            return logits, None
        loss = cross_entropy(logits.view(-1, logits.shape[-1]), targets.reshape(-1))
        return logits, loss

    def forward_cached(self, idx: torch.Tensor, cache: KVCache) -> torch.Tensor:
        """Logits (B, T, vocab) for tokens that follow the ``cache.length`` cached positions;
        appends their keys and values to ``cache``. Equals the full forward's last T rows."""
        return self.lm_head(self._trunk(idx, cache))

    def new_cache(self) -> KVCache:
        return KVCache(self.cfg.n_layers)

    @torch.no_grad()
    def generate(
        self,
        idx: torch.Tensor,
        max_new_tokens: int,
        temperature: float = 1.0,
        top_k: int | None = None,
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        """Extend idx (B, T) by max_new_tokens sampled tokens using a KV cache.

        temperature 0 means greedy decoding. Call ``model.eval()`` first to disable dropout.
        With learned or sinusoidal positions, T + max_new_tokens must not exceed max_seq_len.
        """
        cache = self.new_cache()
        logits = self.forward_cached(idx, cache)[:, -1]  # (B, vocab)
        for step in range(max_new_tokens):
            next_id = next_token(logits, temperature, top_k, generator)  # (B, 1)
            idx = torch.cat([idx, next_id], dim=1)
            if step < max_new_tokens - 1:  # the last token needs no logits
                logits = self.forward_cached(next_id, cache)[:, -1]
        return idx


def build_model(cfg: ModelConfig) -> nn.Module:
    """Instantiate (on CPU, float32) the model a config describes: ``TransformerLM`` (decoder),
    ``EncoderDecoderLM`` (encoder_decoder) or ``MaskedLM`` (encoder), per ``cfg.family``."""
    return FAMILIES[cfg.family](cfg)


FAMILIES = {"decoder": TransformerLM, "encoder_decoder": EncoderDecoderLM, "encoder": MaskedLM}
