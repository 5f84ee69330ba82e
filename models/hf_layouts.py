"""Hugging Face layouts of our models: for each target architecture its ``transformers`` config
and our state dict under its parameter names. ``models.export_hf`` decides which target fits a
config (``ExportError`` otherwise); here every target is assumed to fit.

- ``GPT2LMHeadModel`` (decoder; Pre-LN, LayerNorm, learned positions, MHA, GELU). Our GELU is
  the exact (erf) one, so ``activation_function="gelu"`` (not GPT-2's default tanh
  ``gelu_new``). GPT-2's ``Conv1D`` stores weights as (in, out): every Linear weight is
  transposed. Dropout: all three of GPT-2's.
- ``LlamaForCausalLM`` (decoder; Pre-LN, RMSNorm, RoPE, SwiGLU, any MHA/GQA/MQA). Our RoPE
  already uses Llama's rotate-half layout (dimension i pairs with i + head_dim/2), so q/k rows
  need no permutation; the fused ``qkv`` and ``gate_up`` weights are split into HF's separate
  matrices. Dropout: attention only (Llama has no other).
- ``BertForMaskedLM`` (encoder; Post-LN, LayerNorm, learned positions, GELU, MHA): our
  ``emb_norm`` is BERT's embedding LayerNorm, the MLM head maps one to one
  (``cls.predictions.transform``, tied ``decoder`` + ``bias``); the fused ``qkv`` is split into
  ``query``/``key``/``value``; the one token-type embedding is zero.
- ``MarianMTModel`` (encoder_decoder; Post-LN, LayerNorm with eps 1e-5, Marian's fixed value,
  sinusoidal positions, GELU, MHA): the 2017 model. Marian does not save its sinusoidal tables
  and rebuilds them with sines in the first half of d_model and cosines in the second, where
  ours interleave them (dimension 2i sin, 2i+1 cos). A fixed permutation of the residual
  stream's dimensions maps one layout to the other exactly (every norm acts per position and
  is permutation-equivariant): token table columns, norm gains and biases, and the d_model side
  of every Linear are permuted by ``marian_permutation``; the attention and MLP widths are not.
  Learned positions do not fit (Marian does not save them either; BART adds an embedding
  LayerNorm our 2017 model lacks).

- ``Qwen3MoeForCausalLM`` (decoder; Llama's layout plus per-head ``q_norm``/``k_norm`` and
  sparse MLPs). Its router (``mlp.gate.weight``) and experts (``mlp.experts.gate_up_proj``
  (E, 2f, d) rows [gate | up], ``mlp.experts.down_proj`` (E, d, f)) store exactly our
  ``router``, ``gate_up`` and ``proj``; ``decoder_sparse_step`` is our ``moe_every``. Its
  dense MLPs have no biases; its attention biases (q, k, v and o) follow ``attention_bias``.

- ``Qwen2MoeForCausalLM`` (decoder; Qwen3-MoE's names without QK-norm). Its MoE layer adds
  ``sigmoid(shared_expert_gate(x)) * shared_expert(x)`` with ``shared_expert_gate`` a bias-free
  Linear(d, 1); ours adds the shared experts ungated (DeepSeek). A zero gate weight gives
  sigmoid(0) = 0.5 exactly and the shared down projection times 2 (a power of two, so exact in
  floating point) undoes it. Our n_shared_experts experts are already one SwiGLU MLP of width
  n_shared_experts x expert_d_ff (a sum of MLPs is one wider MLP), Qwen2-MoE's one shared
  expert; with none, that MLP has width 0 (zero-size tensors). q, k, v may have biases in
  Qwen2-MoE, o_proj and the MLPs never: bias-free models only.
- ``Ernie4_5_MoeForCausalLM`` (decoder; Qwen2-MoE's names, ungated ``shared_experts``): its
  router picks the top k of softmax probabilities plus ``e_score_correction_bias`` (our
  ``select_bias``, DeepSeek-V3's aux-free bias: selection only) and always renormalises the
  gate weights (divided by max(sum, 1e-12): the sum of k probabilities is far above that).
  Its RoPE rotates interleaved pairs (2i, 2i+1): q and k rows are permuted within each head
  (``ernie_rope_permutation``), which leaves every q.k product unchanged. ``use_bias`` puts
  biases on every Linear including the output head and the shared experts: zero where ours
  has none.

GPT-2, BERT and Marian always have biases: a ``bias=False`` model is exported with zero biases
(the same function).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from models.config import ModelConfig

Tensors = dict[str, torch.Tensor]
Pair = tuple[torch.Tensor, torch.Tensor]  # (weight, bias)

CLASSES = {
    "gpt2": "GPT2LMHeadModel",
    "llama": "LlamaForCausalLM",
    "qwen3_moe": "Qwen3MoeForCausalLM",
    "qwen2_moe": "Qwen2MoeForCausalLM",
    "ernie4_5_moe": "Ernie4_5_MoeForCausalLM",
    "bert": "BertForMaskedLM",
    "marian": "MarianMTModel",
}


def target_config(target: str, cfg: ModelConfig):
    """The ``transformers`` config of ``target`` (a key of ``CLASSES``) with exactly our shape."""
    import transformers  # ~8 s: only when exporting, never on `import models`

    config_class, fields = _CONFIGS[target]
    return getattr(transformers, config_class)(
        vocab_size=cfg.vocab_size,
        tie_word_embeddings=cfg.tie_embeddings,
        architectures=[CLASSES[target]],
        **fields(cfg),
    )


def _gpt2_config(cfg: ModelConfig) -> dict:
    return dict(
        n_positions=cfg.max_seq_len,
        n_embd=cfg.d_model,
        n_layer=cfg.n_layers,
        n_head=cfg.n_heads,
        n_inner=cfg.ffn_dim,
        activation_function="gelu",  # exact erf GELU, as F.gelu in models/mlp.py
        resid_pdrop=cfg.dropout,
        embd_pdrop=cfg.dropout,
        attn_pdrop=cfg.dropout,
        layer_norm_epsilon=cfg.norm_eps,
        initializer_range=cfg.init_std,
        bos_token_id=None,
        eos_token_id=None,
    )


def _llama_config(cfg: ModelConfig) -> dict:
    return dict(
        hidden_size=cfg.d_model,
        intermediate_size=cfg.ffn_dim,
        num_hidden_layers=cfg.n_layers,
        num_attention_heads=cfg.n_heads,
        num_key_value_heads=cfg.kv_heads,
        head_dim=cfg.head_dim,
        hidden_act="silu",
        max_position_embeddings=cfg.max_seq_len,
        initializer_range=cfg.init_std,
        rms_norm_eps=cfg.norm_eps,
        rope_parameters={"rope_type": "default", "rope_theta": float(cfg.rope_base)},
        attention_bias=cfg.bias,
        mlp_bias=cfg.bias,
        attention_dropout=cfg.dropout,
        bos_token_id=None,
        eos_token_id=None,
    )


def _qwen3_moe_config(cfg: ModelConfig) -> dict:
    llama = _llama_config(cfg)
    del llama["mlp_bias"]
    return dict(
        llama,
        moe_intermediate_size=cfg.expert_d_ff,
        num_experts=cfg.n_experts,
        num_experts_per_tok=cfg.top_k,
        norm_topk_prob=cfg.moe_norm_topk,
        decoder_sparse_step=cfg.moe_every,
        mlp_only_layers=[],
        router_aux_loss_coef=cfg.moe_aux_coef,
        use_sliding_window=False,
    )


def _qwen2_moe_config(cfg: ModelConfig) -> dict:
    qwen3 = _qwen3_moe_config(cfg)
    for llama_only in ("head_dim", "attention_bias"):  # Qwen2-MoE: head_dim = d / heads
        del qwen3[llama_only]
    return dict(
        qwen3,
        shared_expert_intermediate_size=cfg.n_shared_experts * cfg.expert_d_ff,
        qkv_bias=False,  # its o_proj never has a bias: export_hf refuses bias=True
    )


def _ernie4_5_moe_config(cfg: ModelConfig) -> dict:
    return dict(
        hidden_size=cfg.d_model,
        intermediate_size=cfg.ffn_dim,
        num_hidden_layers=cfg.n_layers,
        num_attention_heads=cfg.n_heads,
        num_key_value_heads=cfg.kv_heads,
        hidden_act="silu",
        max_position_embeddings=cfg.max_seq_len,
        initializer_range=cfg.init_std,
        rms_norm_eps=cfg.norm_eps,
        rope_parameters={"rope_type": "default", "rope_theta": float(cfg.rope_base)},
        use_bias=cfg.bias,
        moe_intermediate_size=cfg.expert_d_ff,
        moe_k=cfg.top_k,
        moe_num_experts=cfg.n_experts,
        moe_num_shared_experts=cfg.n_shared_experts,
        moe_layer_start_index=0,
        moe_layer_end_index=cfg.n_layers - 1,
        moe_layer_interval=cfg.moe_every,
        router_aux_loss_coef=cfg.moe_aux_coef,
        pad_token_id=None,  # else its embedding names a padding row (no effect on logits)
        bos_token_id=None,
        eos_token_id=None,
    )


def _bert_config(cfg: ModelConfig) -> dict:
    return dict(
        hidden_size=cfg.d_model,
        num_hidden_layers=cfg.n_layers,
        num_attention_heads=cfg.n_heads,
        intermediate_size=cfg.ffn_dim,
        hidden_act="gelu",  # exact erf GELU, as F.gelu in models/mlp.py and models/mlm.py
        hidden_dropout_prob=cfg.dropout,
        attention_probs_dropout_prob=cfg.dropout,
        max_position_embeddings=cfg.max_seq_len,
        type_vocab_size=1,
        initializer_range=cfg.init_std,
        layer_norm_eps=cfg.norm_eps,
        pad_token_id=None,
    )


def _marian_config(cfg: ModelConfig) -> dict:
    return dict(
        decoder_vocab_size=cfg.vocab_size,
        d_model=cfg.d_model,
        encoder_layers=cfg.encoder_layers,
        decoder_layers=cfg.decoder_layers,
        encoder_attention_heads=cfg.n_heads,
        decoder_attention_heads=cfg.n_heads,
        encoder_ffn_dim=cfg.ffn_dim,
        decoder_ffn_dim=cfg.ffn_dim,
        activation_function="gelu",
        dropout=cfg.dropout,
        attention_dropout=cfg.dropout,
        activation_dropout=0.0,
        max_position_embeddings=cfg.max_seq_len,
        init_std=cfg.init_std,
        scale_embedding=cfg.scale_embeddings,
        share_encoder_decoder_embeddings=True,
        pad_token_id=0,  # only names the decoder start token for HF's generate
        decoder_start_token_id=0,
        eos_token_id=None,
        bos_token_id=None,
        forced_eos_token_id=None,
    )


def target_state(target: str, cfg: ModelConfig, sd: Tensors) -> Tensors:
    """Our state dict (plain module names) -> the target's, under HF parameter names."""
    return _STATES[target](cfg, sd)


def _linear(sd: Tensors, ours: str, out_size: int) -> Pair:
    return sd[f"{ours}.weight"], sd.get(f"{ours}.bias", torch.zeros(out_size))


def _norm(cfg: ModelConfig, sd: Tensors, ours: str) -> Pair:
    return sd[f"{ours}.weight"], sd.get(f"{ours}.bias", torch.zeros(cfg.d_model))


def _put(out: Tensors, theirs: str, pair: Pair) -> None:
    out[f"{theirs}.weight"], out[f"{theirs}.bias"] = pair


def _gpt2_state(cfg: ModelConfig, sd: Tensors) -> Tensors:
    d = cfg.d_model
    out = {
        "transformer.wte.weight": sd["tok_emb.weight"],
        "transformer.wpe.weight": sd["pos.table.weight"],
    }

    def conv1d(theirs: str, ours: str, out_size: int) -> None:
        w, b = _linear(sd, ours, out_size)
        _put(out, theirs, (w.t(), b))  # Conv1D: (in, out)

    for i in range(cfg.n_layers):
        a, h = f"blocks.{i}", f"transformer.h.{i}"
        _put(out, f"{h}.ln_1", _norm(cfg, sd, f"{a}.attn_norm"))
        conv1d(f"{h}.attn.c_attn", f"{a}.attn.qkv", 3 * d)  # [q | k | v] as ours
        conv1d(f"{h}.attn.c_proj", f"{a}.attn.proj", d)
        _put(out, f"{h}.ln_2", _norm(cfg, sd, f"{a}.mlp_norm"))
        conv1d(f"{h}.mlp.c_fc", f"{a}.mlp.fc", cfg.ffn_dim)
        conv1d(f"{h}.mlp.c_proj", f"{a}.mlp.proj", d)
    _put(out, "transformer.ln_f", _norm(cfg, sd, "final_norm"))
    if not cfg.tie_embeddings:
        out["lm_head.weight"] = sd["lm_head.weight"]
    return out


def _llama_state(cfg: ModelConfig, sd: Tensors) -> Tensors:
    q, kv, f = cfg.n_heads * cfg.head_dim, cfg.kv_heads * cfg.head_dim, cfg.ffn_dim
    kinds = ("weight", "bias") if cfg.bias else ("weight",)
    splits = {
        "attn.qkv": (["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"], [q, kv, kv]),
        "mlp.gate_up": (["mlp.gate_proj", "mlp.up_proj"], [f, f]),
    }
    out = {
        "model.embed_tokens.weight": sd["tok_emb.weight"],
        "model.norm.weight": sd["final_norm.weight"],
    }
    for i in range(cfg.n_layers):
        a, h = f"blocks.{i}", f"model.layers.{i}"
        out[f"{h}.input_layernorm.weight"] = sd[f"{a}.attn_norm.weight"]
        out[f"{h}.post_attention_layernorm.weight"] = sd[f"{a}.mlp_norm.weight"]
        for ours, (names, sizes) in splits.items():
            for kind in kinds:
                for name, part in zip(names, sd[f"{a}.{ours}.{kind}"].split(sizes)):
                    out[f"{h}.{name}.{kind}"] = part
        for ours, theirs in (("attn.proj", "self_attn.o_proj"), ("mlp.proj", "mlp.down_proj")):
            for kind in kinds:
                out[f"{h}.{theirs}.{kind}"] = sd[f"{a}.{ours}.{kind}"]
    if not cfg.tie_embeddings:
        out["lm_head.weight"] = sd["lm_head.weight"]
    return out


def _qwen3_moe_state(cfg: ModelConfig, sd: Tensors) -> Tensors:
    """Llama's mapping plus QK-norm gains; the MoE layers' router and experts as they are."""
    return _moe_state(cfg, sd, qk_norm=True)


def _qwen2_moe_state(cfg: ModelConfig, sd: Tensors) -> Tensors:
    """Qwen3-MoE's mapping without QK-norm, plus each MoE layer's (gated) shared expert."""
    return _moe_state(cfg, sd, qk_norm=False, gated_shared=True)


def _moe_state(cfg: ModelConfig, sd: Tensors, qk_norm: bool, gated_shared: bool = False) -> Tensors:
    """Qwen3-MoE / Qwen2-MoE / Ernie 4.5-MoE names; ``gated_shared``: Qwen2-MoE's shared expert
    (always present, gated), else one ungated ``shared_experts`` MLP where ours has one."""
    q, kv, f = cfg.n_heads * cfg.head_dim, cfg.kv_heads * cfg.head_dim, cfg.ffn_dim
    kinds = ("weight", "bias") if cfg.bias else ("weight",)
    out = {
        "model.embed_tokens.weight": sd["tok_emb.weight"],
        "model.norm.weight": sd["final_norm.weight"],
    }
    for i in range(cfg.n_layers):
        a, h = f"blocks.{i}", f"model.layers.{i}"
        out[f"{h}.input_layernorm.weight"] = sd[f"{a}.attn_norm.weight"]
        out[f"{h}.post_attention_layernorm.weight"] = sd[f"{a}.mlp_norm.weight"]
        if qk_norm:
            out[f"{h}.self_attn.q_norm.weight"] = sd[f"{a}.attn.q_norm.weight"]
            out[f"{h}.self_attn.k_norm.weight"] = sd[f"{a}.attn.k_norm.weight"]
        names = ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"]
        for kind in kinds:
            for name, part in zip(names, sd[f"{a}.attn.qkv.{kind}"].split([q, kv, kv])):
                out[f"{h}.{name}.{kind}"] = part
            out[f"{h}.self_attn.o_proj.{kind}"] = sd[f"{a}.attn.proj.{kind}"]
        if not cfg.is_moe_layer(i):  # a dense SwiGLU layer (with biases: Ernie only)
            _swiglu(out, f"{h}.mlp", sd, f"{a}.mlp", f)
            continue
        out[f"{h}.mlp.gate.weight"] = sd[f"{a}.mlp.router.weight"]
        out[f"{h}.mlp.experts.gate_up_proj"] = sd[f"{a}.mlp.gate_up.weight"]
        out[f"{h}.mlp.experts.down_proj"] = sd[f"{a}.mlp.proj.weight"]
        width = cfg.n_shared_experts * cfg.expert_d_ff
        if width and not gated_shared:  # Ernie: out = routed + shared(x), as ours
            _swiglu(out, f"{h}.mlp.shared_experts", sd, f"{a}.mlp.shared", width)
        if gated_shared:  # Qwen2-MoE: out = routed + sigmoid(gate . x) * shared(x)
            shared = {k: v for k, v in sd.items() if k.startswith(f"{a}.mlp.shared.")}
            if not width:  # no shared MLP in ours: an empty one, zero-size tensors
                shared = {
                    f"{a}.mlp.shared.gate_up.weight": torch.zeros(0, cfg.d_model),
                    f"{a}.mlp.shared.proj.weight": torch.zeros(cfg.d_model, 0),
                }
            # The gate: a zero weight gives sigmoid(0) = 0.5 exactly, and the down projection
            # times 2 (a power of two: exact) undoes it, so the shared expert is ungated as ours
            shared[f"{a}.mlp.shared.proj.weight"] = 2 * shared[f"{a}.mlp.shared.proj.weight"]
            _swiglu(out, f"{h}.mlp.shared_expert", shared, f"{a}.mlp.shared", width)
            out[f"{h}.mlp.shared_expert_gate.weight"] = torch.zeros(1, cfg.d_model)
    if not cfg.tie_embeddings:
        out["lm_head.weight"] = sd["lm_head.weight"]
    return out


def ernie_rope_permutation(head_dim: int) -> torch.Tensor:
    """perm with ``ours[perm] == ernie`` over one head's dimensions: Ernie's RoPE rotates the
    pairs (2i, 2i+1) at frequency i, ours (Llama's) the pairs (i, i + head_dim/2)."""
    half = torch.arange(head_dim // 2)
    return torch.stack([half, half + head_dim // 2], dim=-1).flatten()


def _ernie4_5_moe_state(cfg: ModelConfig, sd: Tensors) -> Tensors:
    """Qwen2-MoE's names without the shared-expert gate, q and k rows permuted per head to
    Ernie's interleaved RoPE pairs, and the aux-free selection bias; zero biases where Ernie's
    ``use_bias`` gives the (bias-free) shared experts one."""
    out = _moe_state(cfg, sd, qk_norm=False, gated_shared=False)
    dh, perm = cfg.head_dim, ernie_rope_permutation(cfg.head_dim)
    kinds = ("weight", "bias") if cfg.bias else ("weight",)
    for i in range(cfg.n_layers):
        h = f"model.layers.{i}"
        for name, heads in (("q_proj", cfg.n_heads), ("k_proj", cfg.kv_heads)):
            for kind in kinds:
                t = out[f"{h}.self_attn.{name}.{kind}"]
                rows = t.reshape(heads, dh, *t.shape[1:])[:, perm]  # the head's dims reordered
                out[f"{h}.self_attn.{name}.{kind}"] = rows.reshape(t.shape)
        if cfg.is_moe_layer(i):
            bias = sd[f"blocks.{i}.mlp.select_bias"]
            out[f"{h}.mlp.gate.moe_statics.e_score_correction_bias"] = bias[None].float()
            width = cfg.n_shared_experts * cfg.expert_d_ff
            if width and cfg.bias:
                for name, size in (
                    ("gate_proj", width),
                    ("up_proj", width),
                    ("down_proj", cfg.d_model),
                ):
                    out[f"{h}.mlp.shared_experts.{name}.bias"] = torch.zeros(size)
    if cfg.bias:  # ours never has an output-head bias
        out["lm_head.bias"] = torch.zeros(cfg.vocab_size)
    return out


def _swiglu(out: Tensors, theirs: str, sd: Tensors, ours: str, width: int) -> None:
    """A ``SwiGLUMLP`` (fused ``gate_up`` rows [gate | up]) as HF's three Linears."""
    for kind in ("weight", "bias") if f"{ours}.gate_up.bias" in sd else ("weight",):
        gate, up = sd[f"{ours}.gate_up.{kind}"].split([width, width])
        out[f"{theirs}.gate_proj.{kind}"], out[f"{theirs}.up_proj.{kind}"] = gate, up
        out[f"{theirs}.down_proj.{kind}"] = sd[f"{ours}.proj.{kind}"]


def _bert_state(cfg: ModelConfig, sd: Tensors) -> Tensors:
    d = cfg.d_model
    out: Tensors = {
        "bert.embeddings.word_embeddings.weight": sd["tok_emb.weight"],
        "bert.embeddings.position_embeddings.weight": sd["pos.table.weight"],
        "bert.embeddings.token_type_embeddings.weight": torch.zeros(1, d),
    }
    _put(out, "bert.embeddings.LayerNorm", _norm(cfg, sd, "emb_norm"))
    for i in range(cfg.n_layers):
        a, h = f"blocks.{i}", f"bert.encoder.layer.{i}"
        w, b = _linear(sd, f"{a}.attn.qkv", 3 * d)
        for name, wp, bp in zip(("query", "key", "value"), w.split(d), b.split(d)):
            _put(out, f"{h}.attention.self.{name}", (wp, bp))
        _put(out, f"{h}.attention.output.dense", _linear(sd, f"{a}.attn.proj", d))
        _put(out, f"{h}.attention.output.LayerNorm", _norm(cfg, sd, f"{a}.attn_norm"))
        _put(out, f"{h}.intermediate.dense", _linear(sd, f"{a}.mlp.fc", cfg.ffn_dim))
        _put(out, f"{h}.output.dense", _linear(sd, f"{a}.mlp.proj", d))
        _put(out, f"{h}.output.LayerNorm", _norm(cfg, sd, f"{a}.mlp_norm"))
    _put(out, "cls.predictions.transform.dense", _linear(sd, "mlm_transform", d))
    _put(out, "cls.predictions.transform.LayerNorm", _norm(cfg, sd, "mlm_norm"))
    out["cls.predictions.decoder.weight"] = sd["lm_head.weight"]
    out["cls.predictions.bias"] = sd.get("lm_head.bias", torch.zeros(cfg.vocab_size))
    out["cls.predictions.decoder.bias"] = out["cls.predictions.bias"]
    return out


def marian_permutation(d_model: int) -> torch.Tensor:
    """perm with ``ours[..., perm] == marian``: Marian dim j < d/2 is our 2j, j >= d/2 our
    2(j - d/2) + 1."""
    return torch.cat([torch.arange(0, d_model, 2), torch.arange(1, d_model, 2)])


def _marian_state(cfg: ModelConfig, sd: Tensors) -> Tensors:
    d, perm = cfg.d_model, marian_permutation(cfg.d_model)
    out: Tensors = {"final_logits_bias": torch.zeros(1, cfg.vocab_size)}

    def put_norm(theirs: str, ours: str) -> None:
        w, b = _norm(cfg, sd, ours)
        _put(out, theirs, (w[perm], b[perm]))

    def put_linear(theirs: str, pair: Pair, into_d: bool) -> None:
        """Permute the residual side: output rows (and bias) of a projection into d_model
        (``into_d``), else input columns (a projection out of the residual stream)."""
        w, b = pair
        _put(out, theirs, (w[perm], b[perm]) if into_d else (w[:, perm], b))

    def attention(theirs: str, ours: str, fused: str, sizes: list[int]) -> None:
        names = ["q_proj", "k_proj", "v_proj"][-len(sizes) :]
        w, b = _linear(sd, f"{ours}.{fused}", sum(sizes))
        for name, wp, bp in zip(names, w.split(sizes), b.split(sizes)):
            put_linear(f"{theirs}.{name}", (wp, bp), into_d=False)
        put_linear(f"{theirs}.out_proj", _linear(sd, f"{ours}.proj", d), into_d=True)

    def self_attention_and_mlp(h: str, a: str) -> None:
        attention(f"{h}.self_attn", f"{a}.attn", "qkv", [d, d, d])
        put_norm(f"{h}.self_attn_layer_norm", f"{a}.attn_norm")
        put_linear(f"{h}.fc1", _linear(sd, f"{a}.mlp.fc", cfg.ffn_dim), into_d=False)
        put_linear(f"{h}.fc2", _linear(sd, f"{a}.mlp.proj", d), into_d=True)
        put_norm(f"{h}.final_layer_norm", f"{a}.mlp_norm")

    table = sd["tok_emb.weight"][:, perm]
    for name in ("model.shared", "model.encoder.embed_tokens", "model.decoder.embed_tokens"):
        out[f"{name}.weight"] = table
    for i in range(cfg.encoder_layers):
        self_attention_and_mlp(f"model.encoder.layers.{i}", f"encoder.{i}")
    for i in range(cfg.decoder_layers):
        a, h = f"decoder.{i}", f"model.decoder.layers.{i}"
        self_attention_and_mlp(h, a)
        put_linear(f"{h}.encoder_attn.q_proj", _linear(sd, f"{a}.cross_attn.q", d), into_d=False)
        attention(f"{h}.encoder_attn", f"{a}.cross_attn", "kv", [d, d])
        put_norm(f"{h}.encoder_attn_layer_norm", f"{a}.cross_norm")
    out["lm_head.weight"] = sd["lm_head.weight"][:, perm]
    return out


_CONFIGS: dict[str, tuple[str, Callable[[ModelConfig], dict]]] = {
    "gpt2": ("GPT2Config", _gpt2_config),
    "llama": ("LlamaConfig", _llama_config),
    "qwen3_moe": ("Qwen3MoeConfig", _qwen3_moe_config),
    "qwen2_moe": ("Qwen2MoeConfig", _qwen2_moe_config),
    "ernie4_5_moe": ("Ernie4_5_MoeConfig", _ernie4_5_moe_config),
    "bert": ("BertConfig", _bert_config),
    "marian": ("MarianConfig", _marian_config),
}
_STATES: dict[str, Callable[[ModelConfig, Tensors], Tensors]] = {
    "gpt2": _gpt2_state,
    "llama": _llama_state,
    "qwen3_moe": _qwen3_moe_state,
    "qwen2_moe": _qwen2_moe_state,
    "ernie4_5_moe": _ernie4_5_moe_state,
    "bert": _bert_state,
    "marian": _marian_state,
}
