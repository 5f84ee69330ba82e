"""Export of the encoder (BertForMaskedLM) and encoder-decoder (MarianMTModel) families: the
written directory loads with the Auto classes and gives our logits, padding included; configs
no HF class represents exactly fail naming the field, before writing anything."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml

import models
from models import ExportError, ModelConfig, build_model
from models.export_hf import hf_target, main
from models.hf_layouts import marian_permutation
from models.positions import sinusoidal_table

transformers = pytest.importorskip("transformers")
CONF = Path(__file__).resolve().parents[1] / "conf" / "model"
TINY = dict(vocab_size=97, max_seq_len=16, n_layers=2, d_model=32, n_heads=4)
BERT = dict(family="encoder", norm_position="post", pos_encoding="learned", scale_embeddings=False)


def preset(name: str, **overrides) -> ModelConfig:
    d = yaml.safe_load((CONF / f"{name}.yaml").read_text())
    return ModelConfig.from_dict({**d, **TINY, **overrides})


def trained_like(cfg: ModelConfig) -> torch.nn.Module:
    """Weights away from their init values (biases 0, gains 1), so a dropped, misplaced or
    mis-permuted tensor changes the logits."""
    torch.manual_seed(0)
    model = build_model(cfg).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return model


def assert_same_logits(model, out: Path, expected_class: str) -> None:
    cfg = model.cfg
    src = torch.randint(0, cfg.vocab_size, (2, cfg.max_seq_len))
    mask = torch.ones_like(src)
    mask[1, 10:] = 0  # a padded row
    with torch.no_grad():
        if cfg.family == "encoder":
            hf = transformers.AutoModelForMaskedLM.from_pretrained(out).eval()
            ours = model(src, attention_mask=mask)[0]
            theirs = hf(input_ids=src, attention_mask=mask).logits
        else:
            hf = transformers.AutoModelForSeq2SeqLM.from_pretrained(out).eval()
            tgt = torch.randint(0, cfg.vocab_size, (2, 9))
            ours = model(src, tgt, src_mask=mask)[0]
            theirs = hf(input_ids=src, attention_mask=mask, decoder_input_ids=tgt).logits
    assert type(hf).__name__ == expected_class
    assert ours.shape == theirs.shape
    torch.testing.assert_close(theirs, ours, atol=1e-4, rtol=0)


CASES = {
    "bert": ("gpt2", BERT, "BertForMaskedLM"),
    "bert-untied-nobias-eps": (
        "gpt2",
        dict(BERT, tie_embeddings=False, bias=False, norm_eps=1e-12),
        "BertForMaskedLM",
    ),
    "vanilla_seq2seq": ("vanilla_seq2seq", {}, "MarianMTModel"),
    "seq2seq-untied-unscaled-3+1": (
        "vanilla_seq2seq",
        dict(tie_embeddings=False, scale_embeddings=False, n_encoder_layers=3, n_decoder_layers=1),
        "MarianMTModel",
    ),
    "seq2seq-nobias": ("vanilla_seq2seq", dict(bias=False, d_model=48, n_heads=6), "MarianMTModel"),
}


@pytest.mark.parametrize("case", CASES)
def test_export_round_trips_through_auto_model(case, tmp_path):
    name, overrides, expected_class = CASES[case]
    model = trained_like(preset(name, **overrides))
    out = models.export_hf(model, tmp_path / "hf")
    assert (out / "config.json").is_file() and list(out.glob("*.safetensors"))
    assert_same_logits(model, out, expected_class)


def test_marian_greedy_generation_equals_ours(tmp_path):
    model = trained_like(preset("vanilla_seq2seq"))
    hf = models.export_hf(model, tmp_path / "hf")
    hf = transformers.AutoModelForSeq2SeqLM.from_pretrained(hf).eval()
    src = torch.randint(0, 97, (2, 11))
    ours = model.generate(src, start_id=0, max_new_tokens=8, temperature=0)
    theirs = hf.generate(
        input_ids=src, do_sample=False, num_beams=1, max_new_tokens=8, min_new_tokens=8
    )
    assert torch.equal(ours, theirs)


def test_the_permutation_maps_our_sinusoids_onto_marians():
    import transformers.models.marian.modeling_marian as marian

    d = 32
    theirs = marian.MarianSinusoidalPositionalEmbedding(20, d).create_weight()
    ours = sinusoidal_table(20, d)
    torch.testing.assert_close(ours[:, marian_permutation(d)], theirs, atol=1e-6, rtol=0)
    assert not torch.allclose(ours, theirs)  # the layouts do differ


@pytest.mark.parametrize(
    "name, overrides, field",
    [
        ("gpt2", dict(family="encoder"), "norm_position"),  # BERT is Post-LN
        ("gpt2", dict(BERT, pos_encoding="rope"), "pos_encoding"),
        ("gpt2", dict(BERT, n_kv_heads=2), "n_kv_heads"),
        ("gpt2", dict(BERT, norm="rmsnorm"), "norm"),
        ("gpt2", dict(BERT, scale_embeddings=True), "scale_embeddings"),
        ("vanilla_seq2seq", dict(pos_encoding="learned"), "pos_encoding"),
        ("vanilla_seq2seq", dict(norm_eps=1e-6), "norm_eps"),
        ("vanilla_seq2seq", dict(mlp="swiglu"), "mlp"),
        ("vanilla_seq2seq", dict(n_kv_heads=1), "n_kv_heads"),
        ("vanilla_seq2seq", dict(norm_position="pre"), "norm_position"),
    ],
)
def test_unexportable_config_names_the_field_and_writes_nothing(name, overrides, field, tmp_path):
    model = build_model(preset(name, **overrides))
    with pytest.raises(ExportError) as err:
        models.export_hf(model, tmp_path / "hf")
    message = str(err.value)
    assert message.startswith(f"{field}=") and "\n" not in message
    assert f"exportable {model.cfg.family}:" in message
    assert not (tmp_path / "hf").exists()


def test_cli_exports_an_encoder_decoder_checkpoint(tmp_path, capsys):
    cfg = preset("vanilla_seq2seq")
    model = trained_like(cfg)
    torch.save({"model": model.state_dict(), "model_config": cfg.to_dict()}, tmp_path / "c.pt")
    main(["--checkpoint", str(tmp_path / "c.pt"), "--out", str(tmp_path / "hf")])
    assert "(marian)" in capsys.readouterr().out
    assert_same_logits(model, tmp_path / "hf", "MarianMTModel")
    assert hf_target(preset("gpt2", **BERT)) == "bert"
