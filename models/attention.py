"""Self-attention (causal or bidirectional, as its ``AttnInputs`` say) and cross-attention,
both covering MHA, GQA and MQA through the number of KV heads."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from models.config import ModelConfig
from models.positions import AttnInputs, apply_rope


class KVCache:
    """Keys and values of past positions for every layer, for incremental decoding.

    Stored per layer as (B, n_kv_heads, S, head_dim): GQA/MQA caches only the KV heads.
    """

    def __init__(self, n_layers: int):
        self.keys: list[torch.Tensor | None] = [None] * n_layers
        self.values: list[torch.Tensor | None] = [None] * n_layers

    @property
    def length(self) -> int:
        """Number of positions already cached (the start position of the next chunk)."""
        return 0 if self.keys[0] is None else self.keys[0].shape[2]

    def update(
        self, layer: int, k: torch.Tensor, v: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if self.keys[layer] is not None:
            k = torch.cat([self.keys[layer], k], dim=2)
            v = torch.cat([self.values[layer], v], dim=2)
        self.keys[layer], self.values[layer] = k, v
        return k, v


def qk_norms(cfg: ModelConfig) -> tuple[nn.RMSNorm | None, nn.RMSNorm | None]:
    """QK-norm (``cfg.qk_norm``): an RMSNorm over head_dim for queries and one for keys, each
    gain shared by the heads (Qwen3 / Gemma 3; OLMo 2 norms the whole projection instead).
    Bounds the attention logits, which otherwise grow with the q and k weights."""
    if not cfg.qk_norm:
        return None, None
    return nn.RMSNorm(cfg.head_dim, eps=cfg.norm_eps), nn.RMSNorm(cfg.head_dim, eps=cfg.norm_eps)


class SelfAttention(nn.Module):
    """Multi-head self-attention via ``F.scaled_dot_product_attention``; causal or not and
    any mask come from ``pos`` (see ``models.positions``).

    Weight layout: ``qkv`` is one fused Linear, weight ((n_heads + 2 * n_kv_heads) * head_dim,
    d_model), rows ordered [all query heads | all key heads | all value heads], each head a
    contiguous block of head_dim rows (so q rows = HF ``q_proj``, etc.). ``proj`` is the output
    projection (d_model, d_model). Query head h uses KV head h // (n_heads // n_kv_heads).
    """

    def __init__(self, cfg: ModelConfig, layer_idx: int):
        super().__init__()
        self.layer_idx = layer_idx
        self.n_heads, self.n_kv_heads, self.head_dim = cfg.n_heads, cfg.kv_heads, cfg.head_dim
        self.q_size, self.kv_size = cfg.n_heads * cfg.head_dim, cfg.kv_heads * cfg.head_dim
        self.qkv = nn.Linear(cfg.d_model, self.q_size + 2 * self.kv_size, bias=cfg.bias)
        self.proj = nn.Linear(self.q_size, cfg.d_model, bias=cfg.bias)
        self.q_norm, self.k_norm = qk_norms(cfg)
        # None: SDPA's 1/sqrt(head_dim). muP (and CompleteP, built on it): 1/head_dim, since
        # after training q and k are correlated and q.k grows like head_dim, not its square root
        # (Yang et al. 2022, sec. 6).
        self.scale = 1.0 / cfg.head_dim if cfg.parametrization != "sp" else None
        self.attn_dropout = cfg.dropout
        self.resid_drop = nn.Dropout(cfg.dropout)

    def forward(
        self, x: torch.Tensor, pos: AttnInputs, cache: KVCache | None = None
    ) -> torch.Tensor:
        B, T, _ = x.shape
        q, k, v = self.qkv(x).split([self.q_size, self.kv_size, self.kv_size], dim=-1)
        q = q.view(B, T, self.n_heads, self.head_dim).transpose(1, 2)  # (B, H, T, hd)
        k = k.view(B, T, self.n_kv_heads, self.head_dim).transpose(1, 2)  # (B, K, T, hd)
        v = v.view(B, T, self.n_kv_heads, self.head_dim).transpose(1, 2)  # (B, K, T, hd)
        if self.q_norm is not None:  # per head, over head_dim, before positions
            q, k = self.q_norm(q), self.k_norm(k)
        if pos.cos is not None:
            q, k = apply_rope(q, pos.cos, pos.sin), apply_rope(k, pos.cos, pos.sin)
        if cache is not None:
            k, v = cache.update(self.layer_idx, k, v)  # (B, K, S, hd), S = cached + T
        y = F.scaled_dot_product_attention(
            q,
            k,
            v,
            attn_mask=pos.mask,
            is_causal=pos.is_causal,
            # GQA/MQA: each KV head serves n_heads // n_kv_heads query heads; faster on CPU than
            # repeat_interleave (docs/performance.md), a no-op when n_kv_heads == n_heads.
            enable_gqa=self.n_kv_heads != self.n_heads,
            dropout_p=self.attn_dropout if self.training else 0.0,
            scale=self.scale,
        )  # (B, H, T, hd)
        y = y.transpose(1, 2).reshape(B, T, self.q_size)
        return self.resid_drop(self.proj(y))


def with_key_padding(pos: AttnInputs, keep: torch.Tensor | None) -> AttnInputs:
    """Bidirectional ``pos`` with the padded keys of each sequence masked out; keep (B, S),
    1/True = a real token. The mask becomes (B, H or 1, T, S). (A causal stack needs no key
    mask for right padding: no real position sees a later pad.)"""
    if keep is None:
        return pos
    if pos.is_causal:
        raise ValueError("key padding is for bidirectional attention inputs (causal=False)")
    pad = keep.bool()[:, None, None, :]  # (B, 1, 1, S)
    mask = pos.mask
    if mask is None:
        mask = pad
    elif mask.dtype == torch.bool:
        mask = mask[None] & pad
    else:  # ALiBi's float bias
        mask = mask[None].masked_fill(~pad, float("-inf"))
    return pos._replace(mask=mask, is_causal=False)


class CrossAttention(nn.Module):
    """Decoder queries attend to the encoder output ("memory"); no positions (RoPE and ALiBi
    act on self-attention only). ``q`` (q_size, d_model) and the fused ``kv`` (2 * kv_size,
    d_model), rows [all key heads | all value heads], then ``proj``; GQA/MQA as in
    ``SelfAttention``. The memory's keys and values are computed once per source
    (``memory_kv``) and may be cached for decoding."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = cfg.n_heads, cfg.kv_heads, cfg.head_dim
        self.q_size, self.kv_size = cfg.n_heads * cfg.head_dim, cfg.kv_heads * cfg.head_dim
        self.q = nn.Linear(cfg.d_model, self.q_size, bias=cfg.bias)
        self.kv = nn.Linear(cfg.d_model, 2 * self.kv_size, bias=cfg.bias)
        self.proj = nn.Linear(self.q_size, cfg.d_model, bias=cfg.bias)
        self.q_norm, self.k_norm = qk_norms(cfg)
        self.attn_dropout = cfg.dropout
        self.resid_drop = nn.Dropout(cfg.dropout)

    def memory_kv(self, memory: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        B, S, _ = memory.shape
        k, v = self.kv(memory).split([self.kv_size, self.kv_size], dim=-1)
        k = k.view(B, S, self.n_kv_heads, self.head_dim).transpose(1, 2)  # (B, K, S, hd)
        v = v.view(B, S, self.n_kv_heads, self.head_dim).transpose(1, 2)  # (B, K, S, hd)
        if self.k_norm is not None:
            k = self.k_norm(k)
        return k, v

    def forward(
        self,
        x: torch.Tensor,
        kv: tuple[torch.Tensor, torch.Tensor],
        memory_mask: torch.Tensor | None,
    ) -> torch.Tensor:
        """x (B, T, d); kv from ``memory_kv``; memory_mask (B, 1, 1, S) bool or None."""
        B, T, _ = x.shape
        q = self.q(x).view(B, T, self.n_heads, self.head_dim).transpose(1, 2)  # (B, H, T, hd)
        if self.q_norm is not None:
            q = self.q_norm(q)
        y = F.scaled_dot_product_attention(
            q,
            *kv,
            attn_mask=memory_mask,
            enable_gqa=self.n_kv_heads != self.n_heads,
            dropout_p=self.attn_dropout if self.training else 0.0,
        )  # (B, H, T, hd)
        y = y.transpose(1, 2).reshape(B, T, self.q_size)
        return self.resid_drop(self.proj(y))


class Seq2SeqCache:
    """Decoding state of an encoder-decoder: the decoder's self-attention ``KVCache`` and, per
    decoder layer, the cross-attention keys/values of the memory (computed on first use)."""

    def __init__(self, n_layers: int, memory: torch.Tensor, memory_mask: torch.Tensor | None):
        self.self_attn = KVCache(n_layers)
        self.memory, self.memory_mask = memory, memory_mask
        self.cross: list[tuple[torch.Tensor, torch.Tensor] | None] = [None] * n_layers

    @property
    def length(self) -> int:
        return self.self_attn.length
