"""The conf/model presets compose with Hydra on ModelConfig's defaults into every field, build,
and accept single-axis overrides."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from models import ModelConfig, build_model, count_params
from models.ladder import model_config

CONF = Path(__file__).resolve().parents[1] / "conf"
EXPECTED_ARCH = {
    "vanilla": "post-layernorm-sinusoidal-mha-gelu",
    "gpt2": "pre-layernorm-learned-mha-gelu",
    "llama": "pre-rmsnorm-rope-gqa2-swiglu",
}


def compose_model(preset: str, *overrides: str) -> dict:
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("config", overrides=[f"model={preset}", *overrides])
    return OmegaConf.to_container(cfg.model, resolve=True)


@pytest.mark.parametrize("preset", sorted(EXPECTED_ARCH))
def test_preset_composes_and_builds(preset):
    raw = compose_model(preset)
    assert set(raw) == {f.name for f in dataclasses.fields(ModelConfig)} | {"size"}
    cfg = model_config(raw)
    assert cfg.arch == EXPECTED_ARCH[preset]
    assert (cfg.max_seq_len, cfg.n_layers, cfg.d_model, cfg.n_heads) == (256, 4, 128, 4)
    model = build_model(cfg)
    assert sum(p.numel() for p in model.parameters()) == count_params(cfg).total
    logits, _ = model(torch.zeros(1, 8, dtype=torch.long))
    assert logits.shape == (1, 8, cfg.vocab_size)


def test_preset_specifics():
    llama = model_config(compose_model("llama"))
    assert (llama.n_kv_heads, llama.bias, llama.tie_embeddings) == (2, False, False)
    gpt2 = model_config(compose_model("gpt2"))
    assert (gpt2.bias, gpt2.tie_embeddings) == (True, True)
    vanilla = model_config(compose_model("vanilla"))
    assert (vanilla.bias, vanilla.tie_embeddings) == (True, True)


def test_single_axis_override():
    cfg = model_config(compose_model("gpt2", "model.pos_encoding=rope"))
    assert cfg.arch == "pre-layernorm-rope-mha-gelu"
    cfg = model_config(compose_model("llama", "model.size=3e6"))
    assert cfg.arch == "pre-rmsnorm-rope-gqa2-swiglu"
    assert abs(count_params(cfg).non_embedding / 3e6 - 1) < 0.03


def test_bad_override_names_the_field():
    with pytest.raises(ValueError, match="norm must be one of"):
        model_config(compose_model("gpt2", "model.norm=batchnorm"))
