"""Export to Hugging Face: the written directory loads with AutoModelForCausalLM and reproduces
our logits; configs without an HF equivalent fail naming the field, before writing anything."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml

import models
from models import ExportError, ModelConfig, build_model
from models.export_hf import hf_target, main

transformers = pytest.importorskip("transformers")
CONF = Path(__file__).resolve().parents[1] / "conf" / "model"
TINY = dict(vocab_size=97, max_seq_len=16, n_layers=2, d_model=32, n_heads=4)


def preset(name: str, **overrides) -> ModelConfig:
    d = yaml.safe_load((CONF / f"{name}.yaml").read_text())
    return ModelConfig.from_dict({**d, **TINY, **overrides})


def trained_like(cfg: ModelConfig) -> models.TransformerLM:
    """A model whose biases and norm gains are not at their init values (0 / 1), so a
    dropped or misplaced tensor changes the logits."""
    torch.manual_seed(0)
    model = build_model(cfg).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return model


def assert_same_logits(model, out: Path, expected_class: str) -> None:
    hf = transformers.AutoModelForCausalLM.from_pretrained(out).eval()
    assert type(hf).__name__ == expected_class
    idx = torch.randint(0, model.cfg.vocab_size, (2, model.cfg.max_seq_len))
    with torch.no_grad():
        ours, theirs = model(idx)[0], hf(idx).logits
    assert ours.shape == theirs.shape
    atol = 1e-5 if expected_class == "Qwen3MoeForCausalLM" else 1e-4  # MoE: issue 42's bound
    torch.testing.assert_close(theirs, ours, atol=atol, rtol=0)


CASES = {
    "gpt2": ("gpt2", {}, "GPT2LMHeadModel"),
    "gpt2-untied-nobias": ("gpt2", dict(tie_embeddings=False, bias=False), "GPT2LMHeadModel"),
    "llama-gqa": ("llama", {}, "LlamaForCausalLM"),
    "llama-mha": ("llama", dict(n_kv_heads=None), "LlamaForCausalLM"),
    "llama-mqa": ("llama", dict(n_kv_heads=1), "LlamaForCausalLM"),
    # Qwen3-MoE: every MoE combination it represents (dense layers, top-k, norm_topk, GQA)
    "qwen3-moe": (
        "llama",
        dict(mlp="moe", qk_norm=True, n_experts=4, d_ff=64),
        "Qwen3MoeForCausalLM",
    ),
    "qwen3-moe-every2-norm-top3-tied": (
        "llama",
        dict(
            mlp="moe",
            qk_norm=True,
            n_experts=6,
            top_k=3,
            moe_norm_topk=True,
            n_layers=3,
            moe_every=2,
            moe_granularity=2,
            d_ff=96,
            tie_embeddings=True,
        ),
        "Qwen3MoeForCausalLM",
    ),
    "qwen3-moe-bias-top1": (
        "llama",
        dict(mlp="moe", qk_norm=True, bias=True, top_k=1, d_ff=64),
        "Qwen3MoeForCausalLM",
    ),
    "llama-tied-bias-theta": (
        "llama",
        dict(tie_embeddings=True, bias=True, rope_base=500.0, norm_eps=1e-6),
        "LlamaForCausalLM",
    ),
}


@pytest.mark.parametrize("case", CASES)
def test_export_round_trips_through_auto_model(case, tmp_path):
    name, overrides, expected_class = CASES[case]
    model = trained_like(preset(name, **overrides))
    out = models.export_hf(model, tmp_path / "hf")
    assert (out / "config.json").is_file() and list(out.glob("*.safetensors"))
    assert_same_logits(model, out, expected_class)


def test_gpt2_export_uses_our_exact_gelu(tmp_path):
    out = models.export_hf(trained_like(preset("gpt2")), tmp_path)
    cfg = transformers.AutoConfig.from_pretrained(out)
    assert cfg.activation_function == "gelu"  # erf GELU; GPT-2's default gelu_new is tanh


@pytest.mark.parametrize(
    "overrides, field",
    [
        (dict(norm_position="post"), "norm_position"),
        (dict(pos_encoding="sinusoidal"), "pos_encoding"),
        (dict(pos_encoding="none"), "pos_encoding"),
        (dict(pos_encoding="alibi", norm="rmsnorm", mlp="swiglu"), "pos_encoding"),
        (dict(n_kv_heads=2), "n_kv_heads"),  # GPT-2 has no GQA
        (dict(pos_encoding="rope", mlp="swiglu"), "norm"),  # Llama needs RMSNorm
        (dict(pos_encoding="rope", norm="rmsnorm", mlp="swiglu", qk_norm=True), "qk_norm"),
        (dict(pos_encoding="rope", norm="rmsnorm", mlp="moe"), "qk_norm"),  # Qwen3-MoE needs it
        (
            dict(pos_encoding="rope", norm="rmsnorm", mlp="moe", qk_norm=True, n_shared_experts=1),
            "n_shared_experts",
        ),
    ],
)
def test_unexportable_config_names_the_field_and_writes_nothing(overrides, field, tmp_path):
    model = build_model(preset("gpt2", **overrides))
    with pytest.raises(ExportError) as err:
        models.export_hf(model, tmp_path / "hf")
    message = str(err.value)
    assert message.startswith(f"{field}=") and "\n" not in message
    assert not (tmp_path / "hf").exists()


def test_cli_exports_a_training_checkpoint_with_config_yaml(tmp_path, capsys):
    cfg = preset("llama")
    model = trained_like(cfg)
    run = tmp_path / "run"
    run.mkdir()
    # The layout training.train writes: last.pt holds "model" (and resume state); config.yaml
    # next to it holds the resolved config, whose model section carries `size`.
    torch.save({"model": model.state_dict(), "step": 3}, run / "last.pt")
    resolved = {"model": {**cfg.to_dict(), "size": 1e4}, "train": {"lr": 1e-3}}
    (run / "config.yaml").write_text(yaml.safe_dump(resolved))
    main(["--checkpoint", str(run / "last.pt"), "--out", str(tmp_path / "hf")])
    assert "(llama)" in capsys.readouterr().out
    assert_same_logits(model, tmp_path / "hf", "LlamaForCausalLM")


def test_cli_reads_inline_config_and_compiled_state_names(tmp_path):
    cfg = preset("gpt2")
    model = trained_like(cfg)
    sd = {f"_orig_mod.{k}": v for k, v in model.state_dict().items()}  # torch.compile'd
    torch.save({"model": sd, "model_config": cfg.to_dict()}, tmp_path / "ckpt.pt")
    main(["--checkpoint", str(tmp_path / "ckpt.pt"), "--out", str(tmp_path / "hf")])
    assert_same_logits(model, tmp_path / "hf", "GPT2LMHeadModel")


def test_cli_unexportable_checkpoint_exits_with_one_line(tmp_path):
    cfg = preset("vanilla")
    torch.save(
        {"model": build_model(cfg).state_dict(), "model_config": cfg.to_dict()},
        tmp_path / "ckpt.pt",
    )
    with pytest.raises(SystemExit) as exit_:
        main(["--checkpoint", str(tmp_path / "ckpt.pt"), "--out", str(tmp_path / "hf")])
    assert str(exit_.value).startswith("error: norm_position='post' has no Hugging Face")
    assert hf_target(preset("gpt2")) == "gpt2" and hf_target(preset("llama")) == "llama"


def test_cli_exports_a_sharded_checkpoint(tmp_path, capsys):
    """A `train.parallel=fsdp` checkpoint: last.pt names the shard folder the ranks wrote
    (torch.distributed.checkpoint); the export reads it whole (here written by one process;
    tests/test_train_fsdp.py exports one written by 2 ranks)."""
    from training.parallel import save_sharded
    from training.step import adamw, param_groups

    cfg = preset("llama")
    model = trained_like(cfg)
    run = tmp_path / "run"
    save_sharded(run / "last.pt.shards-3-0a", model, adamw(param_groups(model, 0.1), lr=1e-3))
    torch.save({"shards": "last.pt.shards-3-0a", "step": 3}, run / "last.pt")
    resolved = {"model": {**cfg.to_dict(), "size": 1e4}, "train": {"lr": 1e-3}}
    (run / "config.yaml").write_text(yaml.safe_dump(resolved))
    main(["--checkpoint", str(run / "last.pt"), "--out", str(tmp_path / "hf")])
    assert "(llama)" in capsys.readouterr().out
    assert_same_logits(model, tmp_path / "hf", "LlamaForCausalLM")
    (run / "last.pt.shards-3-0a" / ".metadata").unlink()  # a save killed before it finished
    with pytest.raises(SystemExit, match=r"^error: .*shards-3-0a: the checkpoint's shard folder"):
        main(["--checkpoint", str(run / "last.pt"), "--out", str(tmp_path / "hf2")])
