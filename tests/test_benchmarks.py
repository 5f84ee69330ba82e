"""Smoke tests of the throughput benchmark at a tiny size: it runs end to end, writes its files
and reports sane numbers. No timing assertions (the machine is shared)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("transformers")

from benchmarks.harness import Case, Shape, preset_config, probe_memory  # noqa: E402
from benchmarks.interleave import median_ratio, repetitions  # noqa: E402
from benchmarks.throughput import main  # noqa: E402

TINY = ["--d-models", "32", "--layers", "1", "--seq", "16", "--batch", "2", "--vocab", "64"]


def test_throughput_table_has_every_row_and_positive_numbers(tmp_path, capsys):
    result = main(
        [
            *TINY,
            "--reps",
            "1",
            "--steps",
            "1",
            "--warmup",
            "1",
            "--compile",
            "eager",
            "--no-memory",
            "--out",
            str(tmp_path),
        ]
    )
    rows = result["rows"]
    assert [(r["family"], r["impl"]) for r in rows] == [
        ("llama", "ours"),
        ("llama", "hf"),
        ("gpt2", "ours"),
        ("gpt2", "hf"),
    ]
    for r in rows:
        assert r["d_model"] == 32 and r["mode"] == "eager"
        assert r["tokens_per_s"] > 0 and r["ms_per_step"] > 0 and 0 < r["mfu"]
    assert all(r["ratio"] > 0 for r in rows if r["impl"] == "ours")
    assert result["peak_flops"] > 0 and result["machine"]["threads"] >= 1
    out = capsys.readouterr().out
    assert out.count("| llama | 32 | eager |") == 2 and out.count("| gpt2 | 32 | eager |") == 2
    assert out.strip().splitlines()[-1].startswith("worst ratio ours/HF: ")
    saved = json.loads((tmp_path / "throughput_cpu.json").read_text())
    assert len(saved["rows"]) == 4 and saved["machine"]["torch"]
    md = (tmp_path / "throughput_cpu.md").read_text()
    assert "worst ratio" in md and "--compile eager --no-memory" in md  # the command that made it
    assert saved["machine"]["malloc"] == "system"


def test_benchmark_shapes_match_the_presets_and_hf():
    from models.export_hf import hf_config

    shape = Shape(vocab=4096, d_model=256, layers=4, seq=256, batch=8)
    llama, gpt2 = preset_config("llama", shape), preset_config("gpt2", shape)
    assert (llama.n_heads, llama.kv_heads, llama.ffn_dim, llama.tie_embeddings) == (
        4,
        2,
        680,
        False,
    )
    assert (gpt2.n_heads, gpt2.kv_heads, gpt2.ffn_dim, gpt2.tie_embeddings) == (4, 4, 1024, True)
    hf = hf_config(llama)
    assert (hf.num_key_value_heads, hf.intermediate_size, hf.hidden_size) == (2, 680, 256)


def test_memory_probe_reports_a_positive_peak_in_a_fresh_process():
    case = Case("gpt2", "ours", False, Shape(vocab=64, d_model=32, layers=1, seq=16, batch=2))
    assert probe_memory(case, "fp32", threads=1, warmup=1, steps=1, malloc="keep") > 0


def test_allocator_benchmark_times_both_settings_in_fresh_processes(tmp_path):
    from benchmarks.allocator import main as allocator_main

    (row,) = allocator_main(
        [
            "--d-models",
            "32",
            "--families",
            "gpt2",
            "--impls",
            "ours",
            "--reps",
            "1",
            "--steps",
            "1",
            "--warmup",
            "1",
            "--out",
            str(tmp_path / "a.json"),
        ]
    )
    saved = json.loads((tmp_path / "a.json").read_text())
    assert saved["rows"] == [row] and saved["machine"]["threads"] == 1
    assert row["ms_system"] > 0 and row["ms_keep"] > 0 and row["speedup_keep"] > 0
    assert row["peak_mb_system"] > 0 and row["peak_mb_keep"] > 0


def test_interleaved_order_flips_every_repetition_and_ratios_pair_repetitions():
    assert list(repetitions("abc", 3)) == [list("abc"), list("cba"), list("abc")]
    assert median_ratio([2.0, 4.0, 9.0], [1.0, 4.0, 3.0]) == 2.0  # ratios 2, 1, 3; not 5/3
    with pytest.raises(ValueError):  # a repetition without its pair is a bug, not a shorter median
        median_ratio([1.0, 2.0], [1.0])


@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_flash_hf_models_build_no_mask_when_compiled_and_keep_their_loss(family):
    """`--sdpa flash`: HF models leave the causal mask to SDPA's is_causal under torch.compile
    too (stock sdpa materialises it there, which the flash kernel rejects: every compiled HF
    model failed on the H200), and compute the same loss as stock sdpa."""
    import torch
    from transformers.masking_utils import create_causal_mask

    from benchmarks.harness import build

    case = Case(family, "hf", False, Shape(64, 32, 1, 16, 2))
    x = torch.randint(0, 64, (2, 16), generator=torch.Generator().manual_seed(0))
    y = torch.roll(x, -1, 1)
    stock, _, stock_loss, _ = build(case, torch.device("cpu"))
    flash, _, flash_loss, _ = build(case, torch.device("cpu"), "flash")
    assert flash.config._attn_implementation == "causal_sdpa"
    assert torch.allclose(flash_loss(x, y), stock_loss(x, y), atol=1e-5)

    def mask(config, embeds):  # as the models call it: no padding mask, no cache, positions
        positions = torch.arange(embeds.shape[1]).unsqueeze(0)
        return create_causal_mask(config, embeds, None, None, position_ids=positions)

    compiled, embeds = torch.compile(mask, backend="eager"), torch.zeros(2, 16, 32)
    assert mask(stock.config, embeds) is None  # stock sdpa, eager: no mask either
    assert compiled(flash.config, embeds) is None
    assert compiled(stock.config, embeds).shape == (2, 1, 16, 16)  # what flash rejects


def test_gpu_check_smoke_estimates_memory_of_both_presets(tmp_path):
    from benchmarks.gpu_check import main as gpu_check

    result = gpu_check(["--cpu-smoke", "--parts", "memory", "--out", str(tmp_path)])
    rows = json.loads((tmp_path / "gpu_check_cpu_smoke.json").read_text())["parts"]["memory"][
        "rows"
    ]
    assert rows == result["parts"]["memory"]["rows"]
    assert [r["family"] for r in rows] == ["llama", "gpt2"]
    assert all(r["estimate_gb"] > 0 and r["max_memory_allocated_gb"] is None for r in rows)


@pytest.mark.slow
def test_gpu_check_cpu_smoke_runs_every_part(tmp_path):
    """Every part of benchmarks/gpu_check.sh at tiny shapes (~3 minutes on a quiet machine)."""
    from benchmarks.gpu_check import PARTS
    from benchmarks.gpu_check import main as gpu_check

    parts = gpu_check(["--cpu-smoke", "--out", str(tmp_path)])["parts"]
    assert list(parts) == list(PARTS) and not any("error" in p for p in parts.values())
    assert parts["sweep"]["returncode"] == 0 and parts["sweep"]["runs"] == {"FINISHED": 4}
    assert {r["impl"] for r in parts["throughput"]["rows"]} == {"ours", "hf"}
    assert parts["loop_overhead"]["loop"]["after"]["host_cpu_ms"] > 0
    assert parts["fsdp"]["ranks"] == 2 and parts["fsdp"]["val_loss_diff"] < 1e-4  # 2 gloo ranks
    # the MoE kernels agree with the per-expert loop (fp32 on the CPU)
    moe = parts["moe"]["rows"]
    assert [r["load"] for r in moe] == ["balanced", "skewed"]
    assert max(v for r in moe for k, v in r.items() if k.startswith("max_diff")) < 1e-4
