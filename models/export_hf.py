"""Export a scaling-lab model to a Hugging Face ``transformers`` directory.

    python -m models.export_hf --checkpoint runs/<run_key>/last.pt --out exported/
    >>> from models import export_hf; export_hf(model, "exported/")

The output (``config.json`` + ``model.safetensors``) loads with ``transformers``' Auto classes
and gives our logits (within float32 rounding), so trained models can be evaluated with the
usual tools. Targets per family (``models.hf_layouts`` maps our weights onto each):

- ``decoder`` -> ``GPT2LMHeadModel`` (Pre-LN, LayerNorm, learned positions, MHA, GELU),
  ``LlamaForCausalLM`` (Pre-LN, RMSNorm, RoPE, SwiGLU, any MHA/GQA/MQA), and for ``mlp: moe``
  (SwiGLU experts, softmax-then-top-k routing, every ``moe_every``-th layer MoE) the first of
  ``Qwen3MoeForCausalLM`` (as Llama with QK-norm; no shared experts, no aux-free bias),
  ``Qwen2MoeForCausalLM`` (no QK-norm, no biases; shared experts behind an exact 0.5 gate),
  ``Ernie4_5_MoeForCausalLM`` (no QK-norm, ``moe_norm_topk``; biases, shared experts and the
  aux-free selection bias) that fits: ``AutoModelForCausalLM``. MoE models no layout fits (GELU
  experts, QK-norm with shared experts or aux-free bias, aux-free without ``moe_norm_topk``)
  are refused naming the field; see docs/models.md.
- ``encoder`` -> ``BertForMaskedLM`` (Post-LN, LayerNorm, learned positions, MHA, GELU):
  ``AutoModelForMaskedLM``.
- ``encoder_decoder`` -> ``MarianMTModel`` (Post-LN, LayerNorm with eps 1e-5, sinusoidal
  positions, MHA, GELU): ``AutoModelForSeq2SeqLM``.

Anything else (a Post-LN decoder, sinusoidal/ALiBi/NoPE positions, RMSNorm with learned
positions, a Pre-LN encoder, muP, ...) raises ``ExportError`` naming the first field that no
target of the config's family can represent. Dropout is mapped where HF has it; it does not
affect the function.

Checkpoint format read by the CLI (written by ``training.train``; this module reads the torch file
directly and never imports ``sweeps``): a ``torch.save``'d dict with ``"model"`` (the
``TransformerLM`` state dict) and the model config either inline as ``"model_config"`` (a
``ModelConfig.to_dict()``) or in ``config.yaml`` next to the checkpoint (the resolved run
config; its ``model`` section). ``--config`` points to another such YAML file. A
``train.parallel=fsdp`` checkpoint holds ``"shards"`` instead of ``"model"``: the folder next to
it where the ranks wrote the weights (``torch.distributed.checkpoint``), read here whole.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

import torch
import yaml

from models.config import ModelConfig
from models.hf_layouts import CLASSES, target_config, target_state
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
            "qk_norm": False,
        },
        "llama": {
            "norm_position": "pre",
            "pos_encoding": "rope",
            "norm": "rmsnorm",
            "mlp": "swiglu",
            "scale_embeddings": False,
            "qk_norm": False,
        },
        "qwen3_moe": {
            "norm_position": "pre",
            "pos_encoding": "rope",
            "norm": "rmsnorm",
            "mlp": "moe",
            "scale_embeddings": False,
            "qk_norm": True,  # Qwen3 always norms q and k per head
            "expert_mlp": "swiglu",
            "n_shared_experts": 0,
            "moe_balance": "aux_loss",  # no selection bias in Qwen3-MoE's router
        },
        "qwen2_moe": {
            "norm_position": "pre",
            "pos_encoding": "rope",
            "norm": "rmsnorm",
            "mlp": "moe",
            "scale_embeddings": False,
            "qk_norm": False,  # Qwen2 has no QK-norm
            "expert_mlp": "swiglu",  # every HF MoE expert is gated (GLU): none is a GELU MLP
            "moe_balance": "aux_loss",  # no selection bias in Qwen2-MoE's router either
            "bias": False,  # its o_proj and MLPs never have biases (q, k, v may)
        },
        "ernie4_5_moe": {  # what Qwen2-MoE lacks: biases and the aux-free selection bias
            "norm_position": "pre",
            "pos_encoding": "rope",  # interleaved pairs: q, k rows permuted (exact)
            "norm": "rmsnorm",
            "mlp": "moe",
            "scale_embeddings": False,
            "qk_norm": False,
            "expert_mlp": "swiglu",
            "moe_norm_topk": True,  # Ernie always renormalises the top-k gate weights
        },
    },
    "encoder": {
        "bert": {
            "norm_position": "post",
            "pos_encoding": "learned",
            "norm": "layernorm",
            "mlp": "gelu",
            "scale_embeddings": False,
            "qk_norm": False,
        },
    },
    "encoder_decoder": {
        "marian": {
            "norm_position": "post",
            "pos_encoding": "sinusoidal",
            "norm": "layernorm",
            "mlp": "gelu",
            "norm_eps": 1e-5,  # Marian's LayerNorms use torch's default eps
            "qk_norm": False,
        },
    },
}
_MHA_ONLY = {"gpt2", "bert", "marian"}
_EXPORTABLE = {
    "decoder": "gpt2 (pre, layernorm, learned, MHA, gelu), llama (pre, rmsnorm, rope, swiglu), "
    "qwen3_moe (pre, rmsnorm, rope, qk_norm, moe of swiglu experts, no shared, aux_loss), "
    "qwen2_moe (pre, rmsnorm, rope, no qk_norm, no bias, moe of swiglu experts, aux_loss) or "
    "ernie4_5_moe (pre, rmsnorm, rope, no qk_norm, moe of swiglu experts, moe_norm_topk)",
    "encoder": "bert (post, layernorm, learned, MHA, gelu)",
    "encoder_decoder": "marian (post, layernorm with eps 1e-5, sinusoidal, MHA, gelu)",
}


class ExportError(ValueError):
    """The config has no Hugging Face equivalent; the message names the field."""


def hf_target(cfg: ModelConfig) -> str:
    """``"gpt2"``, ``"llama"``, ``"qwen3_moe"``, ``"qwen2_moe"``, ``"ernie4_5_moe"`` (decoder),
    ``"bert"`` (encoder) or ``"marian"`` (encoder_decoder): the HF architecture that represents
    ``cfg`` exactly (the first in that order when several do)."""
    if cfg.parametrization != "sp":  # HF models have no output multiplier or 1/d attention
        raise ExportError(
            f"parametrization={cfg.parametrization!r} has no Hugging Face equivalent (its output "
            "multiplier and 1/head_dim attention scale); only 'sp' models are exportable"
        )
    if cfg.mlp == "moe":
        _check_moe_layout(cfg)
    targets = _TARGETS[cfg.family]
    best, best_misses, best_rank = None, None, None
    for name, needs in targets.items():
        misses = [(f, v) for f, v in needs.items() if getattr(cfg, f) != v]
        if name in _MHA_ONLY and cfg.kv_heads != cfg.n_heads:
            misses.append(("n_kv_heads", "null (MHA)"))
        if name == "qwen3_moe" and cfg.bias and cfg.moe_every != 1:  # dense MLPs: no bias
            misses.append(("bias", False))
        if not misses:
            return name
        rank = (len(misses), any(f == "mlp" for f, _ in misses))  # ties: the same MLP kind
        if best_misses is None or rank < best_rank:
            best, best_misses, best_rank = name, misses, rank
    field, want = best_misses[0]
    options = sorted({needs.get(field) for needs in targets.values()} - {None}, key=repr)
    allowed = " or ".join(repr(v) for v in options) if field != "n_kv_heads" else want
    raise ExportError(
        f"{field}={getattr(cfg, field)!r} has no Hugging Face equivalent (nearest: {best}, which "
        f"needs {field}={allowed}); exportable {cfg.family}: {_EXPORTABLE[cfg.family]}"
    )


def _check_moe_layout(cfg: ModelConfig) -> None:
    """MoE combinations no HF layout represents whatever the other fields, named up front (the
    nearest-target search below would name a field whose change does not help)."""
    if cfg.expert_mlp != "swiglu":
        raise ExportError(
            f"expert_mlp={cfg.expert_mlp!r} has no Hugging Face equivalent: the experts of every "
            "HF MoE layout (Qwen2/3-MoE, Ernie 4.5-MoE, Mixtral, OLMoE, DeepSeek) are gated "
            "(SwiGLU) MLPs; use expert_mlp='swiglu' to export"
        )
    if cfg.qk_norm and cfg.n_shared_experts:
        raise ExportError(
            f"n_shared_experts={cfg.n_shared_experts} with qk_norm=True has no Hugging Face "
            "equivalent: qwen3_moe (QK-norm) has no shared experts, qwen2_moe and ernie4_5_moe "
            "(shared experts) no QK-norm; set n_shared_experts=0 or qk_norm=false to export"
        )
    if cfg.moe_balance == "aux_free" and (cfg.qk_norm or not cfg.moe_norm_topk):
        other = "qk_norm=True" if cfg.qk_norm else "moe_norm_topk=False"
        raise ExportError(
            f"moe_balance='aux_free' with {other} has no Hugging Face equivalent: the selection "
            "bias of a softmax router exists in ernie4_5_moe only, which has no QK-norm and "
            "always renormalises the top-k weights; export needs qk_norm=false and "
            "moe_norm_topk=true (or moe_balance='aux_loss')"
        )


def hf_config(cfg: ModelConfig):
    """The ``transformers`` config of ``hf_target(cfg)`` with exactly our shape."""
    return target_config(hf_target(cfg), cfg)


def hf_state_dict(cfg: ModelConfig, sd: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Our state dict -> the HF model's (contiguous tensors, HF parameter names)."""
    out = target_state(hf_target(cfg), cfg, _plain_names(sd))
    return {k: v.detach().contiguous() for k, v in out.items()}


def _plain_names(sd: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k.removeprefix("_orig_mod."): v for k, v in sd.items()}  # torch.compile'd model


def to_hf(model: torch.nn.Module, cfg: ModelConfig | None = None):
    """A ``transformers`` model (float32, eval mode) holding ``model``'s weights."""
    import transformers  # ~8 s: only when exporting, never on `import models`

    cfg = cfg or model.cfg
    target = hf_target(cfg)
    with warnings.catch_warnings():  # Qwen2-MoE without shared experts: an empty one
        warnings.filterwarnings("ignore", message="Initializing zero-element tensors")
        hf = getattr(transformers, CLASSES[target])(target_config(target, cfg))
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
    sharded = isinstance(state, dict) and isinstance(state.get("shards"), str)
    if not isinstance(state, dict) or ("model" not in state and not sharded):
        raise ExportError(f"{checkpoint}: expected a dict with a 'model' state dict")
    model_cfg = None if config else state.get("model_config")
    if model_cfg is None:
        config = config or checkpoint.parent / "config.yaml"
        if not config.is_file():
            raise ExportError(f"--config: no config.yaml next to {checkpoint}; pass --config")
        model_cfg = (yaml.safe_load(config.read_text()) or {}).get("model")
        if not isinstance(model_cfg, dict):
            raise ExportError(f"{config}: expected a 'model' section (the resolved model config)")
    cfg = ModelConfig.from_dict({**model_cfg, "size": None})  # the resolved shape, no ladder
    hf_target(cfg)
    model = build_model(cfg)
    if sharded:
        _load_shards(model, checkpoint.parent / state["shards"])
    else:
        model.load_state_dict(_plain_names(state["model"]))
    return model.eval()


def _load_shards(model: torch.nn.Module, folder: Path) -> None:
    """The weights of a `train.parallel=fsdp` checkpoint: `torch.distributed.checkpoint` shards
    written by any number of ranks, read whole into `model` in this one process."""

    import torch.distributed.checkpoint as dcp

    if not (folder / ".metadata").is_file():
        raise ExportError(f"{folder}: the checkpoint's shard folder is missing or incomplete")
    state = {"model": model.state_dict()}
    with warnings.catch_warnings():  # "assuming the intent is to load in a single process": it is
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        dcp.load(state, checkpoint_id=str(folder))
    model.load_state_dict(state["model"])


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
