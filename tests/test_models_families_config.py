"""`model.family` in the config: a decoder's dict and run keys are what they were before the
families existed, bad family fields fail naming the field, the size ladder works per family,
and the vanilla_seq2seq preset is the 2017 model."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from models import ModelConfig, build_model, count_params
from models.config import FAMILY_FIELDS
from models.ladder import config_for_size, model_config, size_ladder
from training.keys import run_key
from training.spec import resolve_config

CONF = Path(__file__).resolve().parents[1] / "conf"
# The fields (in order) every ModelConfig.to_dict had before `family` existed.
DECODER_FIELDS = [
    "vocab_size",
    "max_seq_len",
    "n_layers",
    "d_model",
    "n_heads",
    "n_kv_heads",
    "d_ff",
    "norm_position",
    "norm",
    "pos_encoding",
    "rope_base",
    "mlp",
    "tie_embeddings",
    "scale_embeddings",
    "bias",
    "dropout",
    "norm_eps",
    "init_std",
]
# Run keys computed with the code before this change (commit 467ec07) by the same configs.
KEYS_BEFORE = {
    ("gpt2", None): "a06d5de5c566a0b6",
    ("gpt2", 3e5): "ad07fe28a468be1d",
    ("llama", None): "a2416511f881fe5c",
    ("llama", 3e5): "fb9da6a9904e99a5",
    ("vanilla", None): "224ee6635e235530",
    ("vanilla", 3e5): "d152bce0fc855e6b",
}


def compose_model(preset: str, *overrides: str) -> dict:
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("config", overrides=[f"model={preset}", *overrides])
    return OmegaConf.to_container(cfg.model, resolve=True)


def test_decoder_dict_has_exactly_the_fields_it_had():
    assert list(ModelConfig().to_dict()) == DECODER_FIELDS
    assert run_key({"model": ModelConfig().to_dict()}) == "2365d19420067cf6"  # before: same
    for family in ("encoder", "encoder_decoder"):
        d = ModelConfig(family=family).to_dict()
        assert set(d) == set(DECODER_FIELDS) | set(FAMILY_FIELDS)
        assert model_config(d) == ModelConfig(family=family)


@pytest.mark.parametrize(("preset", "size"), sorted(KEYS_BEFORE, key=str))
def test_run_keys_of_the_decoder_presets_are_unchanged(preset, size, tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for i in range(3):
        (corpus / f"doc{i}.txt").write_text(f"document {i}\n" + "some text to learn\n" * 50)
    cfg = {
        "model": {**compose_model(preset), "size": size},
        "data": {"source": "text", "path": str(corpus), "tokenizer": "byte"},
        "train": {"seq_len": 32, "batch_tokens": 256, "tokens": 8192},
    }
    assert resolve_config(cfg).run_key == KEYS_BEFORE[(preset, size)]


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"family": "seq2seq"}, "family"),
        ({"n_encoder_layers": 2}, "n_encoder_layers"),
        ({"family": "encoder", "n_decoder_layers": 2}, "n_decoder_layers"),
        ({"family": "encoder_decoder", "n_encoder_layers": 0}, "n_encoder_layers"),
        ({"family": "encoder_decoder", "n_decoder_layers": 1.5}, "n_decoder_layers"),
    ],
)
def test_bad_family_fields_name_the_field(overrides, field):
    with pytest.raises(ValueError) as err:
        ModelConfig(**overrides)
    assert field in str(err.value) and "\n" not in str(err.value)


def test_integral_float_layer_counts_are_accepted():
    d = {"family": "encoder_decoder", "n_encoder_layers": 3.0, "n_decoder_layers": 1e0}
    cfg = model_config(d)
    assert (cfg.n_encoder_layers, cfg.n_decoder_layers) == (3, 1)


# (lo, hi, bound) measured over MHA/MQA/GQA2 x GELU/SwiGLU x bias x pre/post, as the decoder's
# bounds in models/ladder.py; both stacks grow together, so the encoder-decoder's grid is coarser.
FAMILY_BOUNDS = {
    "encoder": [(5e4, 2e5, 0.12), (2e5, 1e6, 0.08), (1e6, 1e7, 0.03), (1e7, 1e8, 0.02)],
    "encoder_decoder": [(5e4, 2e5, 0.16), (2e5, 1e6, 0.08), (1e6, 1e7, 0.04), (1e7, 1e8, 0.02)],
}
LADDER_BASES = [
    dict(),
    dict(n_kv_heads=1, mlp="swiglu", bias=False, norm_position="post"),
    dict(n_kv_heads=2, mlp="swiglu", bias=False, norm="rmsnorm", pos_encoding="rope"),
]


@pytest.mark.parametrize("base", LADDER_BASES, ids=["mha", "mqa", "gqa2"])
@pytest.mark.parametrize("family", sorted(FAMILY_BOUNDS))
def test_ladder_works_per_family(family, base):
    cfg0 = ModelConfig(family=family, **base)
    for lo, hi, bound in FAMILY_BOUNDS[family]:
        for i in range(12):
            target = lo * (hi / lo) ** (i / 11)
            cfg = config_for_size(target, cfg0)
            assert cfg.family == family and cfg.attention_kind == cfg0.attention_kind
            assert abs(count_params(cfg).non_embedding / target - 1) <= bound, (target, cfg)
    rungs = size_ladder(1e5, 1e7, cfg0)
    assert len(rungs) >= 9
    assert all(
        r.n_params == count_params(config_for_size(r.target, cfg0)).non_embedding for r in rungs
    )


def test_ladder_rejects_explicit_stack_depths():
    with pytest.raises(ValueError, match="n_encoder_layers must be null when size is set"):
        model_config({"family": "encoder_decoder", "n_encoder_layers": 2, "size": 1e6})


def test_vanilla_seq2seq_preset_is_the_2017_model_at_any_size():
    raw = compose_model("vanilla_seq2seq")
    assert set(raw) == {f.name for f in dataclasses.fields(ModelConfig)} | {"size"}
    cfg = model_config(raw)
    assert cfg.arch == "encoder_decoder-post-layernorm-sinusoidal-mha-gelu"
    assert (cfg.scale_embeddings, cfg.tie_embeddings, cfg.bias) == (True, True, True)
    vanilla = model_config(compose_model("vanilla"))
    assert dataclasses.replace(cfg, family="decoder") == vanilla  # the same block
    base = model_config(
        compose_model("vanilla_seq2seq", "model.d_model=512", "model.n_heads=8", "model.n_layers=6")
    )
    # the 2017 base model by hand: attention 4 (d^2 + d), MLP 2 d 4d + 4d + d, LayerNorms 2d each
    d = 512
    attn, mlp, norm = 4 * (d * d + d), 2 * d * 4 * d + 5 * d, 2 * d
    assert count_params(base).non_embedding == 6 * (attn + mlp + 2 * norm) + 6 * (
        2 * attn + mlp + 3 * norm
    )  # 44.1M; with the paper's ~37k shared BPE vocabulary 63.1M in all (its table 3: 65M)
    sized = model_config(compose_model("vanilla_seq2seq", "model.size=2e6"))
    assert abs(count_params(sized).non_embedding / 2e6 - 1) <= 0.04
    assert sized.family == "encoder_decoder"
    build_model(sized)


@pytest.mark.parametrize(("family", "extra"), [("encoder", 1), ("encoder_decoder", 2 + 1)])
def test_training_enlarges_the_vocabulary_by_the_objectives_ids(family, extra, tmp_path):
    """Training gives a family its objective (training/objectives.py), whose special ids follow
    the tokenizer's: [MASK]; or one sentinel per span (seq_len 32: round(0.15 * 32) = 5 noise
    tokens in round(5 / 3) = 2 spans) and a start id."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "doc.txt").write_text("some text to learn\n" * 50)
    cfg = {
        "model": {**compose_model("vanilla"), "family": family},
        "data": {"source": "text", "path": str(corpus), "tokenizer": "byte"},
        "train": {"seq_len": 32, "batch_tokens": 256, "tokens": 8192},
    }
    assert resolve_config(cfg).model.vocab_size == 256 + extra
