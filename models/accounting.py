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

Families. ``encoder`` (BERT) adds the MLM head's transform (d x d Linear + norm, non-embedding),
its vocab-sized output bias (counted with the head, in ``embedding``), and the embedding norm of
Post-LN (non-embedding); its FLOPs are the decoder's plus the transform (2 d^2 per token), with
attention over all T x T (bidirectional). ``encoder_decoder`` counts both stacks; each decoder
block adds cross-attention (q, fused kv, output projection: as many parameters as
self-attention) and its norm; a learned-position model has two tables (one per stack). Its
FLOPs are per training *sequence* (``flops_per_sequence``): the encoder's S source tokens and the
decoder's T target tokens each pay their stack's per-token matmuls; cross-attention's K/V
projection runs over the S memory positions (once per sequence, not per target token), its
scores and values over T x S; the head over T. ``six_n`` is then 6 (N_enc S + N_dec T) with
``ParamCount.encoder`` and ``.decoder`` the stacks' non-embedding parameters.

Mixture of experts (``mlp: moe``). ``non_embedding`` and ``total`` count every expert (what is
stored and trained); ``non_embedding_active`` counts what one token passes through: the
router, its top_k routed experts and the shared experts (plus attention, norms and any dense
MLP layers), so a dense model's active count is its non-embedding count. The forward FLOPs
are 2 per active MLP parameter and token (dropless routing computes each assignment once) plus
the router's 2 d n_experts (``router``); gathering, sorting, gating and combining do no
matmul. ``six_n`` is 6 N_active (C = 6 N_active D, the compute an MoE is compared at).

QK-norm (``qk_norm``) adds 2 head_dim gains per attention (self and cross) and no matmul FLOPs:
like every norm it is left out of the FLOP count (about 4 head_dim x n_heads FLOPs per token
and layer for the squares, mean and scale, under 1% of the projections' 2 d x 4 d).

``six_n`` is the usual ``6 * non_embedding`` approximation (Kaplan et al. 2020): it leaves out
the LM head and attention over T, which dominate small models, so at the shipped IsoFLOP sizes
(V 1024, seq_len 128) ``exact`` is 1.45-4.6x ``six_n`` (4.61x for the model above). C = 6 N D is
a convention, not the FLOPs the machine pays: say which one a C is (``sweep.budget_flops`` sets
IsoFLOP budgets in either; training logs ``flops_6nd`` and ``flops_exact``).
"""

from __future__ import annotations

from dataclasses import dataclass

from models.config import ModelConfig


@dataclass(frozen=True)
class ParamCount:
    total: int
    non_embedding: int
    embedding: int  # token table + position table(s) + untied head (+ MLM head bias)
    attention: int  # all layers: self-attention qkv + output projection (weights and biases)
    mlp: int  # all layers
    norms: int  # all layers + final norm(s) (+ Post-LN encoder's embedding norm)
    head: int  # untied output head (0 when tied) and the MLM head's bias; in `embedding`
    cross_attention: int = 0  # encoder_decoder: decoder cross-attention q, kv, proj
    mlm_transform: int = 0  # encoder: the MLM head's dense + norm
    encoder: int = 0  # encoder_decoder: the encoder stack's non-embedding params (+ its norm)
    decoder: int = 0  # encoder_decoder: the decoder stack's non-embedding params (+ its norm)
    # Parameters one token passes through (MoE: the router, top_k routed and the shared
    # experts); equal to non_embedding / mlp for a dense model.
    non_embedding_active: int = 0
    mlp_active: int = 0


def norm_params(cfg: ModelConfig) -> int:
    """Parameters of one norm layer: LayerNorm gain + optional bias; RMSNorm gain only."""
    return cfg.d_model * (2 if cfg.norm == "layernorm" and cfg.bias else 1)


def layer_params(cfg: ModelConfig) -> tuple[int, int, int]:
    """(attention, mlp, norms) parameters of one self-attention block of a dense model. A cross
    block adds one more attention's worth (same shapes: q, k, v, output, QK-norm gains) and one
    more norm. A MoE model's MLPs differ by layer: ``mlp_params``."""
    d, b = cfg.d_model, int(cfg.bias)
    qkv_out = (cfg.n_heads + 2 * cfg.kv_heads) * cfg.head_dim
    attn = d * qkv_out + b * qkv_out + cfg.n_heads * cfg.head_dim * d + b * d
    attn += 2 * cfg.head_dim if cfg.qk_norm else 0  # the q and k RMSNorm gains
    return attn, mlp_params(cfg, cfg.layer_mlp(0))[0], 2 * norm_params(cfg)


def _expert_params(cfg: ModelConfig) -> int:
    """One bias-free expert of width ``expert_d_ff``: 3 d f (SwiGLU) or 2 d f (GELU)."""
    return (3 if cfg.expert_mlp == "swiglu" else 2) * cfg.d_model * cfg.expert_d_ff


def mlp_params(cfg: ModelConfig, kind: str) -> tuple[int, int]:
    """(total, active per token) parameters of one MLP of ``kind`` (``cfg.layer_mlp(i)``). A
    dense MLP is all active. A MoE layer: the router (d x E), n_experts routed experts of which
    top_k are active, n_shared_experts always active; no biases."""
    d, b, f = cfg.d_model, int(cfg.bias), cfg.ffn_dim
    if kind == "moe":
        router, expert = d * cfg.n_experts, _expert_params(cfg)
        shared = cfg.n_shared_experts * expert
        return router + cfg.n_experts * expert + shared, router + cfg.top_k * expert + shared
    if kind == "gelu":
        dense = 2 * d * f + b * (f + d)
    else:  # swiglu: fused gate+up (d -> 2f) and down (f -> d)
        dense = 3 * d * f + b * (2 * f + d)
    return dense, dense


def count_params(cfg: ModelConfig) -> ParamCount:
    """Exact parameter counts of ``build_model(cfg)``; see the module docstring for conventions."""
    attn1, mlp1, norms1 = layer_params(cfg)
    n_enc, n_dec = cfg.encoder_layers, cfg.decoder_layers
    n_blocks = n_enc + n_dec
    attn, mlp, norms = n_blocks * attn1, n_blocks * mlp1, n_blocks * norms1
    mlp_active = mlp
    if cfg.mlp == "moe":  # decoder only: the MLP differs by layer
        per_layer = [mlp_params(cfg, cfg.layer_mlp(i)) for i in range(cfg.n_layers)]
        mlp, mlp_active = sum(t for t, _ in per_layer), sum(a for _, a in per_layer)
    final = norm_params(cfg) if cfg.norm_position == "pre" else 0  # per stack
    cross = mlm = head_bias = enc = dec = 0
    n_tables = 1
    if cfg.family == "encoder_decoder":
        cross = n_dec * attn1
        norms += n_dec * norm_params(cfg) + 2 * final  # cross norms, two final norms
        enc = n_enc * (attn1 + mlp1 + norms1) + final
        dec = n_dec * (2 * attn1 + mlp1 + norms1 + norm_params(cfg)) + final
        n_tables = 2
    elif cfg.family == "encoder":
        # Post-LN: a norm after the embeddings; Pre-LN: the final norm
        norms += norm_params(cfg)
        mlm = cfg.d_model * cfg.d_model + int(cfg.bias) * cfg.d_model + norm_params(cfg)
        head_bias = int(cfg.bias) * cfg.vocab_size
    else:
        norms += final
    head = (0 if cfg.tie_embeddings else cfg.vocab_size * cfg.d_model) + head_bias
    pos_table = cfg.max_seq_len * cfg.d_model if cfg.pos_encoding == "learned" else 0
    embedding = cfg.vocab_size * cfg.d_model + n_tables * pos_table + head
    non_embedding = attn + mlp + norms + cross + mlm
    return ParamCount(
        total=non_embedding + embedding,
        non_embedding=non_embedding,
        embedding=embedding,
        attention=attn,
        mlp=mlp,
        norms=norms,
        head=head,
        cross_attention=cross,
        mlm_transform=mlm,
        encoder=enc,
        decoder=dec,
        non_embedding_active=non_embedding - mlp + mlp_active,
        mlp_active=mlp_active,
    )


@dataclass(frozen=True)
class FlopCount:
    six_n: int  # 6 * non_embedding_active (per token); 6 (N_enc S + N_dec T) per sequence
    exact: int  # training (forward + backward) matmul FLOPs = 3 * forward
    forward: int  # forward matmul FLOPs (sum of the components below)
    qkv: int  # self-attention, all layers (both stacks)
    attn_scores: int  # self-attention QK^T, all layers
    attn_values: int  # self-attention softmax(.) V, all layers
    attn_out: int  # self-attention output projection, all layers
    mlp: int  # all layers
    lm_head: int
    cross_q: int = 0  # encoder_decoder: cross-attention query projection over T
    cross_kv: int = 0  # encoder_decoder: cross-attention K/V projection over the S sources
    cross_scores: int = 0  # encoder_decoder: T x S
    cross_values: int = 0  # encoder_decoder: T x S
    cross_out: int = 0  # encoder_decoder: cross-attention output projection over T
    mlm_transform: int = 0  # encoder: the MLM head's d x d transform
    router: int = 0  # MoE: the router's d x n_experts logits, all MoE layers


def _check_len(name: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")


def _stack(cfg: ModelConfig, n_layers: int, tokens: int, keys: int) -> dict[str, int]:
    """Forward FLOPs of ``n_layers`` self-attention blocks over ``tokens`` positions attending
    ``keys`` positions each (T x T: the full matrix, as SDPA's math kernel computes it). An MLP
    costs 2 FLOPs per active parameter and token (MoE: top_k routed + shared experts, each
    token exactly once: dropless, no padding counted), the router 2 d n_experts."""
    d, q_width = cfg.d_model, cfg.n_heads * cfg.head_dim
    per_token = n_layers * tokens
    parts = {
        "qkv": per_token * 2 * d * (cfg.n_heads + 2 * cfg.kv_heads) * cfg.head_dim,
        "attn_scores": per_token * 2 * keys * q_width,  # each query . every key, per query head
        "attn_values": per_token * 2 * keys * q_width,
        "attn_out": per_token * 2 * q_width * d,
    }
    if cfg.mlp != "moe":  # matmul weights only: the biases' adds are not matmul FLOPs
        parts["mlp"] = per_token * 2 * d * cfg.ffn_dim * (2 if cfg.mlp == "gelu" else 3)
        return parts
    mult = 3 if cfg.expert_mlp == "swiglu" else 2
    n_moe = cfg.n_moe_layers
    dense = (n_layers - n_moe) * 2 * d * cfg.ffn_dim * mult
    experts = n_moe * (cfg.top_k + cfg.n_shared_experts) * 2 * _expert_params(cfg)
    parts["mlp"] = tokens * (dense + experts)
    parts["router"] = tokens * n_moe * 2 * d * cfg.n_experts
    return parts


def _flop_count(cfg: ModelConfig, parts: dict[str, int], six_n: int) -> FlopCount:
    forward = sum(parts.values())
    return FlopCount(six_n=six_n, exact=3 * forward, forward=forward, **parts)


def flops_per_token(cfg: ModelConfig, seq_len: int) -> FlopCount:
    """FLOPs per token for training on sequences of ``seq_len`` tokens (see module docstring);
    decoder and encoder families. An encoder-decoder's cost is per sequence pair:
    ``flops_per_sequence``."""
    _check_len("seq_len", seq_len)
    if cfg.family == "encoder_decoder":
        raise ValueError(
            "family: flops_per_token counts one stack; for 'encoder_decoder' use "
            "flops_per_sequence(cfg, seq_len=target length, src_len=source length)"
        )
    parts = _stack(cfg, cfg.n_layers, 1, seq_len)
    if cfg.family == "encoder":
        parts["mlm_transform"] = 2 * cfg.d_model * cfg.d_model
    parts["lm_head"] = 2 * cfg.d_model * cfg.vocab_size
    return _flop_count(cfg, parts, 6 * count_params(cfg).non_embedding_active)


def flops_per_sequence(cfg: ModelConfig, seq_len: int, src_len: int | None = None) -> FlopCount:
    """FLOPs of one training sequence: ``seq_len`` tokens (decoder, encoder), or for
    ``encoder_decoder`` a source of ``src_len`` tokens (default ``seq_len``) through the
    encoder and a target of ``seq_len`` tokens through the decoder."""
    _check_len("seq_len", seq_len)
    if cfg.family != "encoder_decoder":
        if src_len is not None:
            raise ValueError(f"src_len applies to family='encoder_decoder' only, got {src_len!r}")
        per_token = flops_per_token(cfg, seq_len)
        return FlopCount(**{k: v * seq_len for k, v in vars(per_token).items()})
    S = seq_len if src_len is None else src_len
    _check_len("src_len", S)
    T, d, q_width = seq_len, cfg.d_model, cfg.n_heads * cfg.head_dim
    enc = _stack(cfg, cfg.encoder_layers, S, S)
    dec = _stack(cfg, cfg.decoder_layers, T, T)
    parts = {k: enc[k] + dec[k] for k in enc}
    L = cfg.decoder_layers
    parts["cross_q"] = L * T * 2 * d * q_width
    parts["cross_kv"] = L * S * 2 * d * 2 * cfg.kv_heads * cfg.head_dim
    parts["cross_scores"] = L * T * 2 * S * q_width
    parts["cross_values"] = L * T * 2 * S * q_width
    parts["cross_out"] = L * T * 2 * q_width * d
    parts["lm_head"] = T * 2 * d * cfg.vocab_size
    pc = count_params(cfg)
    return _flop_count(cfg, parts, 6 * (pc.encoder * S + pc.decoder * T))


# Rows of the chunked loss's logits buffer: models.loss.CHUNK_ELEMENTS_DEFAULT (CUDA and other
# devices with caching allocators) and CHUNK_ELEMENTS["cpu"], restated here so that planning
# needs no torch (tests check they agree).
LOSS_CHUNK_ELEMENTS = {"cuda": 1 << 26, "cpu": 1 << 21}
ACT_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}  # a matmul's saved input under that precision
GB = 1024**3


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes one process holds at the peak of a training step (an upper estimate: gradients
    are counted whole although the first step's fill while activations are freed)."""

    params: int  # fp32 weights (autocast keeps fp32 masters)
    grads: int  # fp32, one per parameter
    optimizer: int  # AdamW's two fp32 moments
    activations: int  # saved for backward, all layers + head; autocast's weight copies

    @property
    def total(self) -> int:
        return self.params + self.grads + self.optimizer + self.activations


def _layer_activations(cfg: ModelConfig, s: int, b: int, e: int, fused: bool) -> int:
    """Bytes one block saves for backward: Korthikanti et al. 2022 (eq. 1, table 2),
    s b h (34 + 5 a s / h) in 16-bit with dropout and the T x T attention kept, term by term,
    for `e`-byte matmul inputs, fp32 norm inputs (the residual stream under autocast), GQA's
    narrower K/V, the MLP's width and kind, dropout masks only when dropout > 0, and a fused
    SDPA kernel (flash / memory-efficient) that keeps a log-sum-exp instead of T x T."""
    h, a, f = cfg.d_model, cfg.n_heads, cfg.ffn_dim
    sbh, kv = s * b * h, cfg.kv_heads / cfg.n_heads
    mask = 1 if cfg.dropout > 0 else 0  # bool masks, one byte per element
    attn = e * sbh * (1 + 1 + 2 * kv + 1)  # qkv input; q; k, v; output-projection input
    attn += mask * sbh  # residual dropout
    if fused:
        attn += 4 * a * s * b  # the kernel's fp32 log-sum-exp per query and head
    else:  # softmax output (also the probabilities x V input without dropout) + dropout's
        attn += a * s * s * b * (e + mask * (1 + e))
    if cfg.mlp == "moe":  # MoE layers: each token's top_k + shared experts, and its routed copies
        f = max(f, (cfg.top_k + cfg.n_shared_experts) * cfg.expert_d_ff)
    gelu = cfg.layer_mlp(0) == "gelu" or (cfg.mlp == "moe" and cfg.expert_mlp == "gelu")
    hidden = 2 * f if gelu else 4 * f  # gelu: in, out; swiglu: gate|up, silu, product
    mlp = e * s * b * (h + hidden) + mask * sbh
    if cfg.mlp == "moe":  # the gathered rows (top_k copies) and the fp32 router probabilities
        mlp += e * s * b * h * cfg.top_k + 4 * s * b * cfg.n_experts
    norms = 2 * 4 * sbh  # two norms' fp32 inputs
    return int(attn + mlp + norms)


def memory_estimate(
    cfg: ModelConfig, seq_len: int, micro_batch: int, precision: str, device: str = "cuda"
) -> MemoryEstimate:
    """The memory of one training step of ``micro_batch`` sequences of ``seq_len`` (known
    before building): parameters, gradients and AdamW's state at 4 + 4 + 8 bytes per
    parameter, and activations by ``_layer_activations`` per block plus the head. ``precision``
    is resolved (fp32 | bf16 | fp16); ``device`` picks the attention kernel (fused on CUDA,
    the T x T math kernel elsewhere) and the chunked loss's buffer. An encoder-decoder counts
    its cross-attention as one more attention block per decoder layer over ``seq_len``."""
    _check_len("seq_len", seq_len)
    _check_len("micro_batch", micro_batch)
    e, fused, n = ACT_BYTES[precision], device == "cuda", count_params(cfg).total
    s, b, h, V = seq_len, micro_batch, cfg.d_model, cfg.vocab_size
    acts = (cfg.encoder_layers + cfg.decoder_layers) * _layer_activations(cfg, s, b, e, fused)
    if cfg.family == "encoder_decoder":
        cross = e * s * b * h * (2 + 2 * cfg.kv_heads / cfg.n_heads) + 4 * s * b * h
        acts += cfg.decoder_layers * int(cross)
    rows = min(s * b, max(1, LOSS_CHUNK_ELEMENTS.get(device, 1 << 26) // V))
    acts += 4 * s * b * h * 2  # the final norm's input, the loss's saved d loss / d h (fp32)
    acts += 4 * V * h + 4 * rows * V  # the loss's saved head gradient and one logits chunk
    if e < 4:
        acts += e * (n - count_params(cfg).norms)  # autocast's low-precision weight copies
    return MemoryEstimate(params=4 * n, grads=4 * n, optimizer=8 * n, activations=acts)


def largest_micro_batch(
    cfg: ModelConfig, seq_len: int, per_rank: int, precision: str, memory_bytes: float
) -> int | None:
    """The largest divisor of ``per_rank`` sequences whose ``memory_estimate`` fits
    ``memory_bytes`` (with 10% left for the allocator and the CUDA context); None if none."""
    for micro in sorted((m for m in range(1, per_rank + 1) if per_rank % m == 0), reverse=True):
        if memory_estimate(cfg, seq_len, micro, precision).total <= 0.9 * memory_bytes:
            return micro
    return None
