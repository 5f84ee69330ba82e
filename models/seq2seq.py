"""The encoder-decoder Transformer (Vaswani et al. 2017) for sequence-to-sequence training.

Parameter names (the layout an exporter maps from):

- ``tok_emb.weight`` (vocab_size, d_model): one table for source tokens, target tokens and, when
  ``tie_embeddings``, the output head (the 2017 paper's three-way sharing).
- ``enc_pos`` / ``dec_pos``: each stack's position encoding (two learned tables for
  ``learned``; buffers otherwise). RoPE and ALiBi act on self-attention only, never on
  cross-attention.
- ``encoder.{i}``: self-attention blocks as in ``models.lm`` (``attn_norm``, ``attn.qkv``,
  ``attn.proj``, ``mlp_norm``, ``mlp.*``), bidirectional, source padding masked.
- ``decoder.{i}``: the same plus ``cross_norm``, ``cross_attn.q``, ``cross_attn.kv`` (fused,
  see ``CrossAttention``), ``cross_attn.proj``; causal self-attention.
- ``encoder_norm`` / ``decoder_norm`` (Pre-LN only), ``lm_head`` (no bias).

Initialisation as ``models.lm``, with the residual output projections of a stack of L blocks
with k residual sublayers each ~ N(0, init_std / sqrt(k L)): k = 2 in the encoder, 3 in the
decoder.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from models.attention import Seq2SeqCache, with_key_padding
from models.block import init_weights
from models.config import ModelConfig
from models.loss import cross_entropy, linear_cross_entropy
from models.registry import NORMS, POSITIONS, build_block
from models.sampling import next_token


class EncoderDecoderLM(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.enc_pos = POSITIONS[cfg.pos_encoding](cfg)
        self.dec_pos = POSITIONS[cfg.pos_encoding](cfg)
        self.drop = nn.Dropout(cfg.dropout)
        self.encoder = nn.ModuleList(build_block(cfg, i) for i in range(cfg.encoder_layers))
        self.decoder = nn.ModuleList(
            build_block(cfg, i, cross=True) for i in range(cfg.decoder_layers)
        )
        pre = cfg.norm_position == "pre"
        self.encoder_norm = NORMS[cfg.norm](cfg) if pre else nn.Identity()
        self.decoder_norm = NORMS[cfg.norm](cfg) if pre else nn.Identity()
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        if cfg.tie_embeddings:
            self.lm_head.weight = self.tok_emb.weight
        init_weights(self, cfg.init_std, [self.encoder, self.decoder])  # k = 2, 3

    def _embed(self, idx: torch.Tensor, pos: nn.Module, start: int) -> torch.Tensor:
        h = self.tok_emb(idx)  # (B, T, d)
        if self.cfg.scale_embeddings:
            h = h * math.sqrt(self.cfg.d_model)
        return self.drop(pos.add_to_embeddings(h, start))

    def encode(self, src: torch.Tensor, src_mask: torch.Tensor | None = None) -> torch.Tensor:
        """src (B, S) token ids, src_mask (B, S) (1/True = token, 0 = padding) -> memory (B, S, d).
        Every source position sees every unpadded one."""
        h = self._embed(src, self.enc_pos, 0)
        pos = self.enc_pos.attention_inputs(src.shape[1], 0, src.device, causal=False)
        pos = with_key_padding(pos, src_mask)
        for block in self.encoder:
            h = block(h, pos)
        return self.encoder_norm(h)

    def _decode(
        self,
        tgt: torch.Tensor,
        memory: torch.Tensor,
        memory_mask: torch.Tensor | None,
        cache: Seq2SeqCache | None,
    ) -> torch.Tensor:
        start = 0 if cache is None else cache.length
        h = self._embed(tgt, self.dec_pos, start)
        pos = self.dec_pos.attention_inputs(tgt.shape[1], start, tgt.device)  # causal
        for i, block in enumerate(self.decoder):
            kv = None if cache is None else cache.cross[i]
            if kv is None:
                kv = block.cross_attn.memory_kv(memory)  # once per source
                if cache is not None:
                    cache.cross[i] = kv
            h = block(h, pos, kv, memory_mask, None if cache is None else cache.self_attn)
        return self.decoder_norm(h)

    def forward(
        self,
        src: torch.Tensor,
        tgt: torch.Tensor,
        targets: torch.Tensor | None = None,
        src_mask: torch.Tensor | None = None,
        return_logits: bool = True,
    ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """src (B, S) source ids, tgt (B, T) decoder input ids (the targets shifted right behind
        a start token) -> logits (B, T, vocab) and, given targets (B, T), their mean
        cross-entropy (-100 ignored). ``return_logits=False``: as ``TransformerLM.forward``."""
        memory = self.encode(src, src_mask)
        h = self._decode(tgt, memory, _memory_mask(src_mask), None)  # (B, T, d)
        if targets is not None and not return_logits:
            loss = linear_cross_entropy(h.flatten(0, 1), self.lm_head.weight, targets.reshape(-1))
            return None, loss
        logits = self.lm_head(h)
        if targets is None:
            return logits, None
        return logits, cross_entropy(logits.view(-1, logits.shape[-1]), targets.reshape(-1))

    def new_cache(self, src: torch.Tensor, src_mask: torch.Tensor | None = None) -> Seq2SeqCache:
        """Runs the encoder once; the decoder's cross-attention K/V are cached on first use."""
        return Seq2SeqCache(len(self.decoder), self.encode(src, src_mask), _memory_mask(src_mask))

    def forward_cached(self, tgt: torch.Tensor, cache: Seq2SeqCache) -> torch.Tensor:
        """Logits (B, T, vocab) for decoder tokens after the ``cache.length`` cached ones; equals
        the full forward's last T rows."""
        return self.lm_head(self._decode(tgt, cache.memory, cache.memory_mask, cache))

    @torch.no_grad()
    def generate(
        self,
        src: torch.Tensor,
        start_id: int,
        max_new_tokens: int,
        src_mask: torch.Tensor | None = None,
        temperature: float = 1.0,
        top_k: int | None = None,
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        """(B, 1 + max_new_tokens): ``start_id`` then sampled tokens (temperature 0: greedy),
        the encoder run once and every decoder key/value cached. Call ``model.eval()`` first."""
        cache = self.new_cache(src, src_mask)
        out = torch.full((src.shape[0], 1), start_id, dtype=torch.long, device=src.device)
        logits = self.forward_cached(out, cache)[:, -1]  # (B, vocab)
        for step in range(max_new_tokens):
            next_id = next_token(logits, temperature, top_k, generator)  # (B, 1)
            out = torch.cat([out, next_id], dim=1)
            if step < max_new_tokens - 1:
                logits = self.forward_cached(next_id, cache)[:, -1]
        return out


def _memory_mask(src_mask: torch.Tensor | None) -> torch.Tensor | None:
    return None if src_mask is None else src_mask.bool()[:, None, None, :]  # (B, 1, 1, S)
