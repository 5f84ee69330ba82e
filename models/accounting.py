"""Analytic parameter and FLOP counts: the x-axes of every scaling law, computed before building.

Parameter convention (Kaplan et al. 2020, with the head made explicit):
``non_embedding`` excludes the token embedding, any position-embedding table and the output
head (vocab projection) *whether tied or not*, so tied and untied twins have equal
non-embedding counts. Norm gains/biases (including the final norm) and all Linear biases count
as non-embedding. ``embedding`` holds everything else: token table + learned position table +
the untied head's matrix (0 when tied, as it is the token table). Hence
``total == non_embedding + embedding == sum(p.numel() for p in model.parameters())``.

FLOP convention: ``exact`` counts matrix-multiply FLOPs (2 per multiply-add) of one training
token, forward + backward = 3 x forward (backward computes input and weight gradients, one
matmul each). The forward counts every matmul: fused qkv, attention scores QK^T and
probabilities x V over the full T x T (as SDPA's math kernel computes them; a causal kernel
may skip the upper triangle), output projection, MLP, LM head. GQA/MQA shrink the key/value
projections only; attention over query heads costs the same.

Against Chinchilla (Hoffmann et al. 2022, appendix F) this leaves out two kinds of term. The
attention softmax (3 n_heads T per layer and token) is small: 0.5-2.5% of the forward count at
the shipped IsoFLOP sizes. The embedding term (2 V d_model per token, the lookup counted as a
one-hot matmul) is left out because the lookup is a gather that does no matmul, *not* because
it is small: it equals the LM head term, so at V 1024, d_model 32 (llama preset, 1 layer,
N 11,328, seq_len 128) it would add 63% to the forward count (65,536 on 104,384 FLOPs per
token; +46% at 2 layers, +36% at 3). Add it back before comparing with Chinchilla-style counts.

``six_n`` is the usual ``6 * non_embedding`` approximation (Kaplan et al. 2020): it leaves out
the LM head and attention over T, which dominate small models, so at the shipped IsoFLOP sizes
(V 1024, seq_len 128) ``exact`` is 1.45-4.6x ``six_n`` (4.61x for the model above). C = 6 N D is
a convention, not the FLOPs the machine pays: say which one a C is (``sweep.budget_flops`` sets
IsoFLOP budgets in either; training logs ``flops_6nd`` and ``flops_exact``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: models.config imports the ladder, which imports this
    from models.config import ModelConfig


@dataclass(frozen=True)
class ParamCount:
    total: int
    non_embedding: int
    embedding: int  # token table + position table + untied head
    attention: int  # all layers: qkv + output projection (weights and biases)
    mlp: int  # all layers
    norms: int  # all layers + final norm
    head: int  # untied output head (0 when tied); included in `embedding`


def norm_params(cfg: ModelConfig) -> int:
    """Parameters of one norm layer: LayerNorm gain + optional bias; RMSNorm gain only."""
    return cfg.d_model * (2 if cfg.norm == "layernorm" and cfg.bias else 1)


def layer_params(cfg: ModelConfig) -> tuple[int, int, int]:
    """(attention, mlp, norms) parameters of one block."""
    d, b, f = cfg.d_model, int(cfg.bias), cfg.ffn_dim
    qkv_out = (cfg.n_heads + 2 * cfg.kv_heads) * cfg.head_dim
    attn = d * qkv_out + b * qkv_out + cfg.n_heads * cfg.head_dim * d + b * d
    if cfg.mlp == "gelu":
        mlp = 2 * d * f + b * (f + d)
    else:  # swiglu: fused gate+up (d -> 2f) and down (f -> d)
        mlp = 3 * d * f + b * (2 * f + d)
    return attn, mlp, 2 * norm_params(cfg)


def count_params(cfg: ModelConfig) -> ParamCount:
    """Exact parameter counts of ``build_model(cfg)``; see the module docstring for conventions."""
    attn, mlp, norms = layer_params(cfg)
    attn, mlp, norms = cfg.n_layers * attn, cfg.n_layers * mlp, cfg.n_layers * norms
    if cfg.norm_position == "pre":
        norms += norm_params(cfg)  # final norm
    head = 0 if cfg.tie_embeddings else cfg.vocab_size * cfg.d_model
    pos_table = cfg.max_seq_len * cfg.d_model if cfg.pos_encoding == "learned" else 0
    embedding = cfg.vocab_size * cfg.d_model + pos_table + head
    non_embedding = attn + mlp + norms
    return ParamCount(
        total=non_embedding + embedding,
        non_embedding=non_embedding,
        embedding=embedding,
        attention=attn,
        mlp=mlp,
        norms=norms,
        head=head,
    )


@dataclass(frozen=True)
class FlopCount:
    six_n: int  # 6 * non_embedding params
    exact: int  # training (forward + backward) matmul FLOPs per token = 3 * forward
    forward: int  # forward matmul FLOPs per token (sum of the components below)
    qkv: int  # forward, all layers
    attn_scores: int  # QK^T, all layers
    attn_values: int  # softmax(.) V, all layers
    attn_out: int  # output projection, all layers
    mlp: int  # all layers
    lm_head: int


def flops_per_token(cfg: ModelConfig, seq_len: int) -> FlopCount:
    """FLOPs per token for training on sequences of ``seq_len`` tokens (see module docstring)."""
    if isinstance(seq_len, bool) or not isinstance(seq_len, int) or seq_len <= 0:
        raise ValueError(f"seq_len must be a positive integer, got {seq_len!r}")
    d, L, f = cfg.d_model, cfg.n_layers, cfg.ffn_dim
    q_width = cfg.n_heads * cfg.head_dim
    qkv = L * 2 * d * (cfg.n_heads + 2 * cfg.kv_heads) * cfg.head_dim
    attn_scores = L * 2 * seq_len * q_width  # each query . every key, per query head
    attn_values = L * 2 * seq_len * q_width
    attn_out = L * 2 * q_width * d
    mlp = L * 2 * d * f * (2 if cfg.mlp == "gelu" else 3)
    lm_head = 2 * d * cfg.vocab_size
    forward = qkv + attn_scores + attn_values + attn_out + mlp + lm_head
    return FlopCount(
        six_n=6 * count_params(cfg).non_embedding,
        exact=3 * forward,
        forward=forward,
        qkv=qkv,
        attn_scores=attn_scores,
        attn_values=attn_values,
        attn_out=attn_out,
        mlp=mlp,
        lm_head=lm_head,
    )
