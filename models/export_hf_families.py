"""Hugging Face layouts of the encoder and encoder-decoder families (used by ``models.export_hf``,
which decides whether a config fits and raises ``ExportError`` otherwise).

- ``BertForMaskedLM`` for ``encoder`` with Post-LN, LayerNorm, learned positions, GELU, MHA:
  our ``emb_norm`` is BERT's embedding LayerNorm, the MLM head maps one to one
  (``cls.predictions.transform``, tied ``decoder`` + ``bias``); the fused ``qkv`` is split into
  ``query``/``key``/``value``; the one token-type embedding is zero. BERT always has biases: a
  ``bias=False`` model is exported with zero biases (same function).
- ``MarianMTModel`` for ``encoder_decoder`` with Post-LN, LayerNorm (eps 1e-5, Marian's fixed
  value), sinusoidal positions, GELU, MHA: the 2017 model. Marian does not save its sinusoidal
  tables and rebuilds them with sines in the first half of d_model and cosines in the second,
  where ours interleave them (dimension 2i sin, 2i+1 cos). A fixed permutation of the residual
  stream's dimensions maps one layout to the other exactly (every norm acts per position and
  is permutation-equivariant): token table columns, norm gains and biases, and the d_model side
  of every Linear are permuted by ``marian_permutation``; the attention and MLP widths are not.
  Learned positions do not fit (Marian does not save them either; BART adds an embedding
  LayerNorm our 2017 model lacks).
"""

from __future__ import annotations

import torch

from models.config import ModelConfig

Tensors = dict[str, torch.Tensor]


def marian_permutation(d_model: int) -> torch.Tensor:
    """perm with ``ours[..., perm] == marian``: Marian dim j < d/2 is our 2j, j >= d/2 our
    2(j - d/2) + 1."""
    return torch.cat([torch.arange(0, d_model, 2), torch.arange(1, d_model, 2)])


def bert_config(cfg: ModelConfig):
    import transformers

    return transformers.BertConfig(
        vocab_size=cfg.vocab_size,
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
        tie_word_embeddings=cfg.tie_embeddings,
        pad_token_id=None,
        architectures=["BertForMaskedLM"],
    )


def marian_config(cfg: ModelConfig):
    import transformers

    return transformers.MarianConfig(
        vocab_size=cfg.vocab_size,
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
        tie_word_embeddings=cfg.tie_embeddings,
        pad_token_id=0,  # only names the decoder start token for HF's generate
        decoder_start_token_id=0,
        eos_token_id=None,
        bos_token_id=None,
        forced_eos_token_id=None,
        architectures=["MarianMTModel"],
    )


def _linear(sd: Tensors, ours: str, out_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    return sd[f"{ours}.weight"], sd.get(f"{ours}.bias", torch.zeros(out_size))


def _norm(cfg: ModelConfig, sd: Tensors, ours: str) -> tuple[torch.Tensor, torch.Tensor]:
    return sd[f"{ours}.weight"], sd.get(f"{ours}.bias", torch.zeros(cfg.d_model))


def bert_state(cfg: ModelConfig, sd: Tensors) -> Tensors:
    d = cfg.d_model
    out: Tensors = {
        "bert.embeddings.word_embeddings.weight": sd["tok_emb.weight"],
        "bert.embeddings.position_embeddings.weight": sd["pos.table.weight"],
        "bert.embeddings.token_type_embeddings.weight": torch.zeros(1, d),
    }

    def put(theirs: str, pair: tuple[torch.Tensor, torch.Tensor]) -> None:
        out[f"{theirs}.weight"], out[f"{theirs}.bias"] = pair

    put("bert.embeddings.LayerNorm", _norm(cfg, sd, "emb_norm"))
    for i in range(cfg.n_layers):
        a, h = f"blocks.{i}", f"bert.encoder.layer.{i}"
        w, b = _linear(sd, f"{a}.attn.qkv", 3 * d)
        for name, wp, bp in zip(("query", "key", "value"), w.split(d), b.split(d)):
            put(f"{h}.attention.self.{name}", (wp, bp))
        put(f"{h}.attention.output.dense", _linear(sd, f"{a}.attn.proj", d))
        put(f"{h}.attention.output.LayerNorm", _norm(cfg, sd, f"{a}.attn_norm"))
        put(f"{h}.intermediate.dense", _linear(sd, f"{a}.mlp.fc", cfg.ffn_dim))
        put(f"{h}.output.dense", _linear(sd, f"{a}.mlp.proj", d))
        put(f"{h}.output.LayerNorm", _norm(cfg, sd, f"{a}.mlp_norm"))
    put("cls.predictions.transform.dense", _linear(sd, "mlm_transform", d))
    put("cls.predictions.transform.LayerNorm", _norm(cfg, sd, "mlm_norm"))
    out["cls.predictions.decoder.weight"] = sd["lm_head.weight"]
    out["cls.predictions.bias"] = sd.get("lm_head.bias", torch.zeros(cfg.vocab_size))
    out["cls.predictions.decoder.bias"] = out["cls.predictions.bias"]
    return out


def marian_state(cfg: ModelConfig, sd: Tensors) -> Tensors:
    d, perm = cfg.d_model, marian_permutation(cfg.d_model)
    out: Tensors = {"final_logits_bias": torch.zeros(1, cfg.vocab_size)}

    def put_norm(theirs: str, ours: str) -> None:
        w, b = _norm(cfg, sd, ours)
        out[f"{theirs}.weight"], out[f"{theirs}.bias"] = w[perm], b[perm]

    def put_linear(theirs: str, w: torch.Tensor, b: torch.Tensor, into_d: bool) -> None:
        """Permute the residual side: output rows (and bias) of a projection into d_model
        (``into_d``), else input columns (a projection out of the residual stream)."""
        w, b = (w[perm], b[perm]) if into_d else (w[:, perm], b)
        out[f"{theirs}.weight"], out[f"{theirs}.bias"] = w, b

    def attention(theirs: str, ours: str, fused: str, sizes: list[int]) -> None:
        names = ["q_proj", "k_proj", "v_proj"][-len(sizes) :]
        w, b = _linear(sd, f"{ours}.{fused}", sum(sizes))
        for name, wp, bp in zip(names, w.split(sizes), b.split(sizes)):
            put_linear(f"{theirs}.{name}", wp, bp, into_d=False)
        put_linear(f"{theirs}.out_proj", *_linear(sd, f"{ours}.proj", d), into_d=True)

    def mlp(h: str, a: str) -> None:
        put_linear(f"{h}.fc1", *_linear(sd, f"{a}.mlp.fc", cfg.ffn_dim), into_d=False)
        put_linear(f"{h}.fc2", *_linear(sd, f"{a}.mlp.proj", d), into_d=True)

    table = sd["tok_emb.weight"][:, perm]
    for name in ("model.shared", "model.encoder.embed_tokens", "model.decoder.embed_tokens"):
        out[f"{name}.weight"] = table
    for i in range(cfg.encoder_layers):
        a, h = f"encoder.{i}", f"model.encoder.layers.{i}"
        attention(f"{h}.self_attn", f"{a}.attn", "qkv", [d, d, d])
        put_norm(f"{h}.self_attn_layer_norm", f"{a}.attn_norm")
        mlp(h, a)
        put_norm(f"{h}.final_layer_norm", f"{a}.mlp_norm")
    for i in range(cfg.decoder_layers):
        a, h = f"decoder.{i}", f"model.decoder.layers.{i}"
        attention(f"{h}.self_attn", f"{a}.attn", "qkv", [d, d, d])
        put_norm(f"{h}.self_attn_layer_norm", f"{a}.attn_norm")
        w, b = _linear(sd, f"{a}.cross_attn.q", d)
        put_linear(f"{h}.encoder_attn.q_proj", w, b, into_d=False)
        attention(f"{h}.encoder_attn", f"{a}.cross_attn", "kv", [d, d])
        put_norm(f"{h}.encoder_attn_layer_norm", f"{a}.cross_norm")
        mlp(h, a)
        put_norm(f"{h}.final_layer_norm", f"{a}.mlp_norm")
    out["lm_head.weight"] = sd["lm_head.weight"][:, perm]
    return out
