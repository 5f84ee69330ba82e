"""What the training benchmarks share: the model pairs they time (`Case`, `Shape`,
`preset_config`, `Runner`), the model-shape command-line flags (`add_shape_args`), a training
step in a fresh process (`probe`: peak memory without other models' allocations), the host
allocator setting (`set_malloc`) and the machine description (`machine`).

    python -m benchmarks.harness '<probe payload>'   # what `probe` runs (internal)

One step = forward, mean cross-entropy over every position (ours: `training.step.loss`, the
training path, a chunked head + loss that never builds the logits; HF: its logits and
`F.cross_entropy`, with `use_cache=False`), backward, AdamW step (`training.step.adamw` over
`training.step.param_groups`: fused when the device supports it, else foreach; weight decay on
matrices only), with bf16 autocast when the benchmark's dtype is bf16.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
import transformers
import yaml
from torch.nn.attention import SDPBackend, sdpa_kernel
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from models import ModelConfig, build_model
from models.export_hf import to_hf
from training.hostmem import keep_freed_memory
from training.step import adamw, param_groups
from training.step import loss as training_loss

ROOT = Path(__file__).resolve().parents[1]
FAMILIES = ("llama", "gpt2")


def int_list(text: str) -> list[int]:
    """`--d-models 32,128` -> [32, 128]."""
    return [int(v) for v in text.split(",")]


def add_shape_args(parser: argparse.ArgumentParser, d_models: list[int]) -> None:
    """The model-shape flags every model benchmark takes: families, widths, layers, sequence
    length, batch and vocabulary (`Shape`)."""
    parser.add_argument("--families", default=list(FAMILIES), type=lambda s: s.split(","))
    parser.add_argument("--d-models", default=d_models, type=int_list)
    parser.add_argument("--layers", default=4, type=int)
    parser.add_argument("--seq", default=256, type=int)
    parser.add_argument("--batch", default=8, type=int)
    parser.add_argument("--vocab", default=4096, type=int)


@dataclass(frozen=True)
class Shape:
    vocab: int
    d_model: int
    layers: int
    seq: int
    batch: int


@dataclass(frozen=True)
class Case:
    family: str  # llama | gpt2
    impl: str  # ours | hf
    compiled: bool
    shape: Shape

    @property
    def label(self) -> str:
        mode = "compiled" if self.compiled else "eager"
        return f"{self.family} d{self.shape.d_model} {mode} {self.impl}"


# ----- models ---------------------------------------------------------------------------------
def preset_config(family: str, shape: Shape):
    """Our preset with the benchmark shape: head_dim 32 at d_model 128, else 64; Llama keeps
    its preset's GQA ratio (2 query heads per KV head)."""
    preset = yaml.safe_load((ROOT / "conf" / "model" / f"{family}.yaml").read_text())
    n_heads = max(4, shape.d_model // 64)
    return ModelConfig.from_dict(
        {
            **preset,
            "vocab_size": shape.vocab,
            "max_seq_len": shape.seq,
            "n_layers": shape.layers,
            "d_model": shape.d_model,
            "n_heads": n_heads,
            "n_kv_heads": n_heads // 2 if family == "llama" else None,
            "size": None,
        }
    )


# HF's own SDPA attention, with the causal mask left to SDPA's is_causal whenever no padding mask
# is given and queries and keys have one length: the benchmark's batches (unpadded, unpacked:
# positions 0..T-1). Stock "sdpa" drops the mask only outside torch.compile: compiling, HF cannot
# tell that the positions are unpacked, so it materialises the mask, which SDPA's flash kernel
# rejects: `--sdpa flash` failed on every compiled HF model ("No available kernel", H200,
# transformers 5.17). Not for padded or packed batches.
CAUSAL_SDPA = "causal_sdpa"


def _causal_sdpa_mask(*args, attention_mask=None, q_length=None, kv_length=None, **kwargs):
    if attention_mask is None and q_length == kv_length:
        return None  # what stock sdpa returns in eager mode for these batches
    return sdpa_mask(
        *args, attention_mask=attention_mask, q_length=q_length, kv_length=kv_length, **kwargs
    )


AttentionInterface.register(CAUSAL_SDPA, sdpa_attention_forward)
AttentionMaskInterface.register(CAUSAL_SDPA, _causal_sdpa_mask)


def build(case: Case, device, sdpa: str = "default"):
    """(model, optimizer, loss function, config) on ``device``, float32 weights, train mode.
    ``sdpa="flash"``: HF models attend through `CAUSAL_SDPA` (no mask tensor, compiled too)."""
    cfg = preset_config(case.family, case.shape)
    torch.manual_seed(0)
    ours = build_model(cfg)
    model = ours if case.impl == "ours" else to_hf(ours)
    if case.impl == "hf":
        model.config.use_cache = False
        if sdpa == "flash":
            model.set_attn_implementation(CAUSAL_SDPA)
    model = model.to(device).train()
    forward = torch.compile(model) if case.compiled else model
    opt = adamw(param_groups(model, weight_decay=0.1), lr=1e-4)

    def loss_fn(x, y):
        if case.impl == "ours":
            return training_loss(forward, x, y, label_smoothing=0.0)  # what training.train calls
        logits = forward(input_ids=x, use_cache=False).logits  # (B, T, V)
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), y.view(-1))

    return model, opt, loss_fn, cfg


class Runner:
    """One model, its optimizer and a fixed batch; ``run(n)`` does n training steps."""

    def __init__(self, case: Case, device, dtype: str, sdpa: str = "default"):
        self.case, self.device = case, device
        self.model, self.opt, self.loss_fn, self.cfg = build(case, device, sdpa)
        g = torch.Generator().manual_seed(0)
        s = case.shape
        tokens = torch.randint(0, s.vocab, (s.batch, s.seq + 1), generator=g).to(device)
        self.x, self.y = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
        self.autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=dtype == "bf16")
        flash = [SDPBackend.FLASH_ATTENTION]
        self.sdpa = (lambda: sdpa_kernel(flash)) if sdpa == "flash" else contextlib.nullcontext

    def run(self, steps: int) -> float:
        """Seconds for ``steps`` training steps (one host sync, at the end)."""
        t0 = time.perf_counter()
        for _ in range(steps):
            with self.autocast, self.sdpa():
                loss = self.loss_fn(self.x, self.y)
            loss.backward()
            self.opt.step()
            self.opt.zero_grad(set_to_none=True)
        if self.device.type == "cuda":
            torch.cuda.synchronize()
        else:
            loss.item()
        return time.perf_counter() - t0

    def static_bytes(self) -> int:
        params = sum(p.numel() * p.element_size() for p in self.model.parameters())
        state = sum(
            t.numel() * t.element_size()
            for s in self.opt.state.values()
            for t in s.values()
            if hasattr(t, "numel")
        )
        return params + state


def _proc_status_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def probe(case: Case, dtype: str, threads: int, warmup: int, steps: int, malloc: str) -> dict:
    """``case``'s training steps in a fresh Python process, so no other model's allocations (or
    allocator setting) count: {"peak_mb": peak RSS above the RSS after imports, "ms_per_step":
    mean of the ``steps`` timed steps after ``warmup``}."""
    payload = json.dumps(
        {
            "case": asdict(case),
            "dtype": dtype,
            "threads": threads,
            "warmup": warmup,
            "steps": steps,
            "malloc": malloc,
        }
    )
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.harness", payload],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        raise RuntimeError(f"probe of {case.label} failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def probe_memory(
    case: Case, dtype: str, threads: int, warmup: int, steps: int, malloc: str
) -> float:
    """Peak RSS (MB) of ``case``'s training steps, from `probe`."""
    return probe(case, dtype, threads, warmup, steps, malloc)["peak_mb"]


def set_malloc(malloc: str) -> None:
    """``keep``: glibc keeps freed blocks (what ``training.train`` does on the CPU,
    training/hostmem.py); ``system``: the C library's defaults, what a plain script gets. Both
    implementations in the process run under the same setting."""
    if malloc == "keep" and not keep_freed_memory():
        raise SystemExit("--malloc keep: needs glibc (Linux); use --malloc system")


def _probe_main(payload: str) -> None:
    p = json.loads(payload)
    set_malloc(p["malloc"])
    torch.set_num_threads(p["threads"])
    case = Case(**{**p["case"], "shape": Shape(**p["case"]["shape"])})
    base_kb = _proc_status_kb("VmRSS")  # torch, transformers and models already imported
    runner = Runner(case, torch.device("cpu"), p["dtype"])
    runner.run(p["warmup"])
    seconds = runner.run(p["steps"])
    print(
        json.dumps(
            {
                "peak_mb": (_proc_status_kb("VmHWM") - base_kb) / 1024,
                "ms_per_step": 1e3 * seconds / p["steps"],
            }
        )
    )


def machine(device, threads: int, malloc: str) -> dict:
    cpu = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    info = {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "threads": threads,
        "malloc": malloc,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "load_average_1m_at_end": os.getloadavg()[0],  # other processes share these cores
    }
    if device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
    return info


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


if __name__ == "__main__":
    _probe_main(sys.argv[1])
