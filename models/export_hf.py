"""Export a scaling-lab model to a Hugging Face ``transformers`` directory.

    python -m models.export_hf --checkpoint runs/<run_key>/last.pt --out exported/
    >>> from models import export_hf; export_hf(model, "exported/")

The output (``config.json`` + ``model.safetensors``) loads with
``transformers.AutoModelForCausalLM.from_pretrained(out)`` and gives our logits (within float32
rounding), so trained models can be evaluated with the usual tools. Decoder targets:

- ``GPT2LMHeadModel``: pre-LN, LayerNorm, learned positions, MHA, GELU. Our GELU is the exact
  (erf) one, so ``activation_function="gelu"`` (not GPT-2's default tanh ``gelu_new``). GPT-2's
  ``Conv1D`` stores weights as (in, out): every Linear weight is transposed. GPT-2 always has
  biases; a ``bias=False`` model is exported with zero biases (same function).
- ``LlamaForCausalLM``: pre-LN, RMSNorm, RoPE, SwiGLU, any MHA/GQA/MQA. Our RoPE already uses
  Llama's rotate-half layout (dimension i pairs with i + head_dim/2), so q/k rows need no
  permutation; the fused ``qkv`` and ``gate_up`` weights are split into HF's separate matrices.

The other families (``models.export_hf_families``): ``encoder`` -> ``BertForMaskedLM``
(``AutoModelForMaskedLM``), ``encoder_decoder`` -> ``MarianMTModel`` (``AutoModelForSeq2SeqLM``).

Anything else (a Post-LN decoder, sinusoidal/ALiBi/NoPE positions, RMSNorm with learned
positions, a Pre-LN encoder, ...) raises ``ExportError`` naming the first field that no target
of the config's family can represent. Dropout is mapped
where HF has it (GPT-2: all three; Llama: attention only); it does not affect the function.

Checkpoint format read by the CLI (written by ``training.train``; this module reads the torch file
directly and never imports ``sweeps``): a ``torch.save``'d dict with ``"model"`` (the
``TransformerLM`` state dict) and the model config either inline as ``"model_config"`` (a
``ModelConfig.to_dict()``) or in ``config.yaml`` next to the checkpoint (the resolved run
config; its ``model`` section). ``--config`` points to another such YAML file.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from models.config import ModelConfig
from models.export_hf_families import bert_config, bert_state, marian_config, marian_state
from models.lm import build_model

# What each target needs, per family; checked in this order so the error names the most basic
# mismatch. "MHA" targets have no GQA/MQA (n_kv_heads must be null or n_heads).
_TARGETS = {
    "decoder": {
        "gpt2": {
            "norm_position": "pre",
            "pos_encoding": "learned",
            "norm": "layernorm",
            "mlp": "gelu",
            "scale_embeddings": False,
        },
        "llama": {
            "norm_position": "pre",
            "pos_encoding": "rope",
            "norm": "rmsnorm",
            "mlp": "swiglu",
            "scale_embeddings": False,
        },
    },
    "encoder": {
        "bert": {
            "norm_position": "post",
            "pos_encoding": "learned",
            "norm": "layernorm",
            "mlp": "gelu",
            "scale_embeddings": False,
        },
    },
    "encoder_decoder": {
        "marian": {
            "norm_position": "post",
            "pos_encoding": "sinusoidal",
            "norm": "layernorm",
            "mlp": "gelu",
            "norm_eps": 1e-5,  # Marian's LayerNorms use torch's default eps
        },
    },
}
_MHA_ONLY = {"gpt2", "bert", "marian"}
_EXPORTABLE = {
    "decoder": "gpt2 (pre, layernorm, learned, MHA, gelu) or llama (pre, rmsnorm, rope, swiglu)",
    "encoder": "bert (post, layernorm, learned, MHA, gelu)",
    "encoder_decoder": "marian (post, layernorm with eps 1e-5, sinusoidal, MHA, gelu)",
}
_CLASSES = {
    "gpt2": "GPT2LMHeadModel",
    "llama": "LlamaForCausalLM",
    "bert": "BertForMaskedLM",
    "marian": "MarianMTModel",
}


class ExportError(ValueError):
    """The config has no Hugging Face equivalent; the message names the field."""


def hf_target(cfg: ModelConfig) -> str:
    """``"gpt2"``, ``"llama"`` (decoder), ``"bert"`` (encoder) or ``"marian"``
    (encoder_decoder): the HF architecture that represents ``cfg`` exactly."""
    if cfg.parametrization != "sp":  # HF models have no output multiplier or 1/d attention
        raise ExportError(
            f"parametrization={cfg.parametrization!r} has no Hugging Face equivalent (its output "
            "multiplier and 1/head_dim attention scale); only 'sp' models are exportable"
        )
    targets = _TARGETS[cfg.family]
    best, best_misses = None, None
    for name, needs in targets.items():
        misses = [(f, v) for f, v in needs.items() if getattr(cfg, f) != v]
        if name in _MHA_ONLY and cfg.kv_heads != cfg.n_heads:
            misses.append(("n_kv_heads", "null (MHA)"))
        if not misses:
            return name
        if best_misses is None or len(misses) < len(best_misses):
            best, best_misses = name, misses
    field, want = best_misses[0]
    options = sorted({needs.get(field) for needs in targets.values()} - {None}, key=repr)
    allowed = " or ".join(repr(v) for v in options) if field != "n_kv_heads" else want
    raise ExportError(
        f"{field}={getattr(cfg, field)!r} has no Hugging Face equivalent (nearest: {best}, which "
        f"needs {field}={allowed}); exportable {cfg.family}: {_EXPORTABLE[cfg.family]}"
    )


def hf_config(cfg: ModelConfig):
    """The ``transformers`` config (GPT2, Llama, Bert or Marian) with exactly our shape."""
    import transformers

    target = hf_target(cfg)
    if target == "bert":
        return bert_config(cfg)
    if target == "marian":
        return marian_config(cfg)
    if target == "gpt2":
        return transformers.GPT2Config(
            vocab_size=cfg.vocab_size,
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
            tie_word_embeddings=cfg.tie_embeddings,
            bos_token_id=None,
            eos_token_id=None,
            architectures=["GPT2LMHeadModel"],
        )
    return transformers.LlamaConfig(
        vocab_size=cfg.vocab_size,
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
        tie_word_embeddings=cfg.tie_embeddings,
        bos_token_id=None,
        eos_token_id=None,
        architectures=["LlamaForCausalLM"],
    )


def hf_state_dict(cfg: ModelConfig, sd: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Our state dict -> the HF model's (contiguous tensors, HF parameter names)."""
    sd = {k.removeprefix("_orig_mod."): v for k, v in sd.items()}  # torch.compile'd model
    mapping = {
        "gpt2": _gpt2_state,
        "llama": _llama_state,
        "bert": bert_state,
        "marian": marian_state,
    }
    out = mapping[hf_target(cfg)](cfg, sd)
    return {k: v.detach().contiguous() for k, v in out.items()}


def _gpt2_state(cfg: ModelConfig, sd: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    def linear(ours: str, theirs: str, out_features: int) -> None:
        out[f"{theirs}.weight"] = sd[f"{ours}.weight"].t()  # Conv1D: (in, out)
        out[f"{theirs}.bias"] = sd.get(f"{ours}.bias", torch.zeros(out_features))

    def norm(ours: str, theirs: str) -> None:
        out[f"{theirs}.weight"] = sd[f"{ours}.weight"]
        out[f"{theirs}.bias"] = sd.get(f"{ours}.bias", torch.zeros(cfg.d_model))

    out = {
        "transformer.wte.weight": sd["tok_emb.weight"],
        "transformer.wpe.weight": sd["pos.table.weight"],
    }
    for i in range(cfg.n_layers):
        a, h = f"blocks.{i}", f"transformer.h.{i}"
        norm(f"{a}.attn_norm", f"{h}.ln_1")
        linear(f"{a}.attn.qkv", f"{h}.attn.c_attn", 3 * cfg.d_model)  # [q | k | v] as ours
        linear(f"{a}.attn.proj", f"{h}.attn.c_proj", cfg.d_model)
        norm(f"{a}.mlp_norm", f"{h}.ln_2")
        linear(f"{a}.mlp.fc", f"{h}.mlp.c_fc", cfg.ffn_dim)
        linear(f"{a}.mlp.proj", f"{h}.mlp.c_proj", cfg.d_model)
    norm("final_norm", "transformer.ln_f")
    if not cfg.tie_embeddings:
        out["lm_head.weight"] = sd["lm_head.weight"]
    return out


def _llama_state(cfg: ModelConfig, sd: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    q, kv, f = cfg.n_heads * cfg.head_dim, cfg.kv_heads * cfg.head_dim, cfg.ffn_dim
    out = {
        "model.embed_tokens.weight": sd["tok_emb.weight"],
        "model.norm.weight": sd["final_norm.weight"],
    }
    for i in range(cfg.n_layers):
        a, h = f"blocks.{i}", f"model.layers.{i}"
        out[f"{h}.input_layernorm.weight"] = sd[f"{a}.attn_norm.weight"]
        out[f"{h}.post_attention_layernorm.weight"] = sd[f"{a}.mlp_norm.weight"]
        splits = {
            "attn.qkv": (["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"], [q, kv, kv]),
            "mlp.gate_up": (["mlp.gate_proj", "mlp.up_proj"], [f, f]),
        }
        for ours, (names, sizes) in splits.items():
            for kind in ("weight", "bias") if cfg.bias else ("weight",):
                for name, part in zip(names, sd[f"{a}.{ours}.{kind}"].split(sizes)):
                    out[f"{h}.{name}.{kind}"] = part
        for ours, theirs in (("attn.proj", "self_attn.o_proj"), ("mlp.proj", "mlp.down_proj")):
            for kind in ("weight", "bias") if cfg.bias else ("weight",):
                out[f"{h}.{theirs}.{kind}"] = sd[f"{a}.{ours}.{kind}"]
    if not cfg.tie_embeddings:
        out["lm_head.weight"] = sd["lm_head.weight"]
    return out


def to_hf(model: torch.nn.Module, cfg: ModelConfig | None = None):
    """A ``transformers`` model (float32, eval mode) holding ``model``'s weights."""
    import transformers

    cfg = cfg or model.cfg
    hf_cfg = hf_config(cfg)
    hf = getattr(transformers, _CLASSES[hf_target(cfg)])(hf_cfg)
    missing, unexpected = hf.load_state_dict(hf_state_dict(cfg, model.state_dict()), strict=False)
    tied = {"lm_head.weight", "cls.predictions.decoder.weight"} if cfg.tie_embeddings else set()
    # Marian rebuilds its sinusoidal tables itself (never saved); they are ours permuted
    rebuilt = {"model.encoder.embed_positions.weight", "model.decoder.embed_positions.weight"}
    missing = [k for k in missing if k not in tied | rebuilt]
    if missing or unexpected:  # a mapping bug, never user input
        raise RuntimeError(f"export mapping mismatch: missing {missing}, unexpected {unexpected}")
    if cfg.tie_embeddings:
        hf.tie_weights()
    return hf.float().eval()


def export_hf(model: torch.nn.Module, out_dir: str | Path) -> Path:
    """Write ``model`` (a ``TransformerLM``) as a Hugging Face model directory; returns it.

    Raises ``ExportError`` (naming the field) before writing anything if the config has no
    Hugging Face equivalent.
    """
    hf_target(model.cfg)  # fail before importing transformers or touching the disk
    out = Path(out_dir)
    to_hf(model).save_pretrained(out)
    return out


# ----- CLI ----------------------------------------------------------------------------------
def load_checkpoint_model(checkpoint: Path, config: Path | None = None) -> torch.nn.Module:
    """Rebuild the ``TransformerLM`` saved in a ``training.train`` checkpoint (see module doc)."""
    state = torch.load(checkpoint, map_location="cpu", weights_only=True)
    if not isinstance(state, dict) or "model" not in state:
        raise ExportError(f"{checkpoint}: expected a dict with a 'model' state dict")
    model_cfg = None if config else state.get("model_config")
    if model_cfg is None:
        config = config or checkpoint.parent / "config.yaml"
        if not config.is_file():
            raise ExportError(f"--config: no config.yaml next to {checkpoint}; pass --config")
        import yaml

        model_cfg = (yaml.safe_load(config.read_text()) or {}).get("model")
        if not isinstance(model_cfg, dict):
            raise ExportError(f"{config}: expected a 'model' section (the resolved model config)")
    cfg = ModelConfig.from_dict({**model_cfg, "size": None})  # the resolved shape, no ladder
    hf_target(cfg)
    model = build_model(cfg)
    sd = {k.removeprefix("_orig_mod."): v for k, v in state["model"].items()}
    model.load_state_dict(sd)
    return model.eval()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        prog="python -m models.export_hf", description=__doc__.split("\n")[0]
    )
    p.add_argument("--checkpoint", type=Path, required=True, help="a training.train .pt checkpoint")
    p.add_argument("--out", type=Path, required=True, help="output directory")
    p.add_argument("--config", type=Path, help="resolved run config YAML (default: next to it)")
    args = p.parse_args(argv)
    if not args.checkpoint.is_file():
        sys.exit(f"error: --checkpoint: {args.checkpoint} is not a file")
    try:
        model = load_checkpoint_model(args.checkpoint, args.config)
        out = export_hf(model, args.out)
    except (ExportError, ValueError) as e:
        sys.exit(f"error: {e}")
    print(f"exported {model.cfg.arch} ({hf_target(model.cfg)}) to {out}")


if __name__ == "__main__":
    main()
