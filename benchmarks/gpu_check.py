"""The prepared GPU check's parts, one process, one JSON (what benchmarks/gpu_check.sh runs).

    python -m benchmarks.gpu_check                 # one CUDA device: GPT-2-small shapes
    python -m benchmarks.gpu_check --cpu-smoke     # the same code at tiny shapes on the CPU

Parts, each timed and recorded even when another fails:
- `throughput`: MFU and tokens/s in bf16, torch.compile off and on, of our llama and gpt2
  presets and transformers' LlamaForCausalLM and GPT2LMHeadModel of the same shape (d_model
  768, 12 layers, T 1024, 8 sequences), `benchmarks.throughput` in this process.
- `loop_overhead`: `benchmarks.loop_overhead` on the device (64 x 1024 tokens, log_every 10).
- `memory`: `models.accounting.memory_estimate` of a training step against
  `torch.cuda.max_memory_allocated` over three steps of `training.step.optimizer_step`.
- `moe`: the MoE layer (8 SwiGLU experts, top-2) at d_model 768 and 8 x 1024 tokens in bf16,
  forward + backward by `torch._grouped_mm` (the kernel the layer picks on CUDA), the padded
  bmm and the per-expert loop, balanced and skewed loads (`benchmarks.moe_dispatch`).
- `fsdp`: on 2+ GPUs, the same run under `train.parallel=ddp` and `fsdp` through torchrun on
  every GPU (up to 8): both finish, the same final loss; skipped with one GPU.
- `sweep`: `python -m sweeps.run sweep=tiny` (2 sizes x 2 token budgets) end to end into a
  temporary store; its exit status, wall time and the runs' states.

Writes `gpu_check_<cuda|cpu_smoke>.json` to `--out`; exits 1 if a part failed.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

import mlflow
import torch
from accelerate import Accelerator

from benchmarks import loop_overhead, moe_dispatch, throughput
from benchmarks.harness import ROOT, Shape, machine, preset_config
from models import build_model
from models.accounting import GB, memory_estimate
from training.config import TrainConfig
from training.data import stdlib_files
from training.ranks import reset_accelerate_state
from training.step import Update, loss, make_optimizer, optimizer_step, step_and_clip

GPU_SHAPE = Shape(vocab=50304, d_model=768, layers=12, seq=1024, batch=8)
SMOKE_SHAPE = Shape(vocab=64, d_model=32, layers=1, seq=16, batch=2)


def throughput_part(args, work: Path) -> dict:
    shape = SMOKE_SHAPE if args.cpu_smoke else GPU_SHAPE
    argv = [
        *("--d-models", str(shape.d_model), "--layers", str(shape.layers)),
        *("--seq", str(shape.seq), "--batch", str(shape.batch), "--vocab", str(shape.vocab)),
        *("--out", str(work / "throughput")),
    ]
    if args.cpu_smoke:  # compiling on the CPU takes minutes: the smoke run checks the code
        argv += ["--device", "cpu", "--dtype", "fp32", "--compile", "eager", "--no-memory"]
        argv += ["--reps", "1", "--steps", "1", "--warmup", "1"]
    else:  # flash only: a silent fallback to the math kernel fails instead of skewing numbers
        argv += ["--device", "cuda", "--dtype", "bf16", "--compile", "both", "--sdpa", "flash"]
        argv += ["--reps", "3", "--steps", "5", "--warmup", "3"]
        argv += ["--peak-tflops", str(args.peak_tflops)]
    return throughput.main(argv)


def loop_part(args, work: Path) -> dict:
    if args.cpu_smoke:
        argv = ["--steps", "20", "--batch", "4", "--seq", "64", "--vocab", "512"]
        argv += ["--corpus-tokens", "100000", "--reps", "1", "--sampler-batches", "5"]
    else:
        argv = ["--steps", "200", "--reps", "2"]
    return loop_overhead.main(argv)


class RandomBatches:
    """Seeded random (x, y) token batches already on `device`."""

    def __init__(self, shape: Shape, device):
        self.shape, self.device = shape, device
        self.g = torch.Generator(device=device).manual_seed(0)

    def next(self):
        s = self.shape
        w = torch.randint(0, s.vocab, (s.batch, s.seq + 1), generator=self.g, device=self.device)
        return w[:, :-1], w[:, 1:]


def measured_peak(cfg, shape: Shape, precision: str, device) -> int | None:
    """Peak bytes allocated by building `cfg`, its AdamW and three training steps (CUDA;
    None elsewhere, after running the same steps)."""
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.empty_cache()
        base = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
    reset_accelerate_state()
    accelerator = Accelerator(
        cpu=not cuda, mixed_precision="no" if precision == "fp32" else precision
    )
    torch.manual_seed(0)
    raw = build_model(cfg).to(device)
    model, optimizer = accelerator.prepare(raw, make_optimizer(raw, TrainConfig()))
    update = Update(*step_and_clip(accelerator, optimizer), list(model.parameters()), 1.0)
    batches = RandomBatches(shape, device)
    for _ in range(3):
        optimizer_step(model, batches, accelerator, update, lambda m, x, y: loss(m, x, y, 0.0))
    peak = torch.cuda.max_memory_allocated(device) - base if cuda else None
    del model, optimizer, raw, update
    reset_accelerate_state()
    return peak


def memory_part(args, work: Path) -> dict:
    device = torch.device("cpu" if args.cpu_smoke else "cuda")
    shape = SMOKE_SHAPE if args.cpu_smoke else GPU_SHAPE
    precision = "fp32" if args.cpu_smoke else "bf16"
    rows = []
    for family in ("llama", "gpt2"):
        cfg = preset_config(family, shape)
        est = memory_estimate(cfg, shape.seq, shape.batch, precision, device.type)
        peak = measured_peak(cfg, shape, precision, device)
        rows.append(
            {
                "family": family,
                "precision": precision,
                "micro_batch": shape.batch,
                "estimate_gb": est.total / GB,
                "estimate_parts_gb": {
                    k: getattr(est, k) / GB for k in ("params", "grads", "optimizer", "activations")
                },
                "max_memory_allocated_gb": None if peak is None else peak / GB,
                "estimate_over_measured": None if peak is None else est.total / peak,
            }
        )
    return {"rows": rows}


def small_corpus(folder: Path) -> Path:
    """60 small stdlib files as a text corpus (~300 KB): the sweep checks the pipeline, not
    the data preparation of the whole stdlib."""
    folder.mkdir(parents=True, exist_ok=True)
    small = [p for _, p in stdlib_files() if 2_000 < p.stat().st_size < 8_000][:60]
    for i, p in enumerate(small):
        (folder / f"doc{i:03d}.txt").write_text(p.read_text(encoding="utf-8"), encoding="utf-8")
    return folder


def sweep_part(args, work: Path) -> dict:
    """`sweeps.run sweep=tiny` in a fresh process, into a store and runs folder of its own."""
    uri = f"sqlite:///{work / 'sweep' / 'mlruns.db'}"
    command = [
        sys.executable,
        *("-m", "sweeps.run", "sweep=tiny", f"tracking.uri={uri}"),
        *("tracking.experiment=gpu-check", f"paths.runs_dir={work / 'sweep' / 'runs'}"),
        f"paths.cache_dir={work / 'sweep' / 'cache'}",
        *("data.source=text", f"data.path={small_corpus(work / 'corpus')}"),
        "data.eval_tokens=1024",  # the small corpus's validation split holds ~3500 tokens
        "train.progress=none",
        "train.compile=false",  # compiling is the throughput part's; this one checks the pipeline
    ]
    (work / "sweep").mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    proc = subprocess.run(
        command, cwd=ROOT, capture_output=True, text=True, timeout=args.sweep_timeout
    )
    wall = time.perf_counter() - t0
    mlflow.set_tracking_uri(uri)
    runs = mlflow.search_runs(experiment_names=["gpu-check"])
    parent = "tags.mlflow.parentRunId"
    points = runs[runs[parent].notna()] if parent in runs else runs.iloc[:0]
    failed = {"error": f"sweeps.run exited {proc.returncode}"} if proc.returncode else {}
    return failed | {
        "command": " ".join(command[1:]),
        "returncode": proc.returncode,
        "wall_s": wall,
        "runs": {str(k): int(v) for k, v in points["status"].value_counts().items()},
        "final_val_loss": sorted(points.get("metrics.final_val_loss", []).dropna().tolist())
        if len(points)
        else [],
        "output_tail": (proc.stdout + proc.stderr)[-2000:],
    }


def moe_part(args, work: Path) -> dict:
    """`benchmarks.moe_dispatch` on the device: each kernel's ms and speed-up over the loop,
    and its largest difference from the loop (an error where it is not finite)."""
    smoke = args.cpu_smoke
    shape = SMOKE_SHAPE if smoke else GPU_SHAPE
    bench = argparse.Namespace(
        experts=8, top_k=2, batch=shape.batch, seq=shape.seq, reps=1 if smoke else 5, warmup=1
    )
    device = torch.device("cpu" if smoke else "cuda")
    dtype = torch.float32 if smoke else torch.bfloat16
    rows = [
        moe_dispatch.compare(shape.d_model, load, bench, device, dtype)
        for load in ("balanced", "skewed")
    ]
    out: dict = {"dtype": str(dtype), "rows": rows, "table": moe_dispatch.table(rows)}
    diffs = [v for r in rows for k, v in r.items() if k.startswith("max_diff")]
    if not all(math.isfinite(d) for d in diffs):
        out["error"] = "a kernel's output or gradient is not finite"
    return out


def fsdp_part(args, work: Path) -> dict:
    """Every GPU of the machine (up to 8; 2 gloo CPU ranks with --cpu-smoke) trains the same
    run twice through torchrun, `train.parallel=ddp` then `fsdp`: both must finish with the
    same losses (bf16 on GPUs: within 2e-2; fp32 on the CPU: 1e-4). Skipped with one GPU."""
    ranks = 2 if args.cpu_smoke else min(torch.cuda.device_count(), 8)
    if ranks < 2:
        return {"skipped": f"{ranks} GPU: the FSDP and multi-GPU part needs 2 or more"}
    shape = SMOKE_SHAPE if args.cpu_smoke else GPU_SHAPE
    model = [f"model.d_model={shape.d_model}", f"model.n_layers={shape.layers}"]
    model += ["model=llama", f"model.n_heads={max(2, shape.d_model // 64)}"]
    uri = f"sqlite:///{work / 'fsdp' / 'mlruns.db'}"
    batch_tokens = shape.seq * shape.batch * ranks
    common = [
        *model,
        *(f"train.seq_len={shape.seq}", f"train.batch_tokens={batch_tokens}"),
        *(f"train.tokens={20 * batch_tokens}", "train.eval_every=1000", "train.progress=none"),
        *(f"tracking.uri={uri}", f"paths.cache_dir={work / 'fsdp' / 'cache'}"),
        *("data.source=text", f"data.path={small_corpus(work / 'corpus')}"),
        *("data.eval_tokens=1024", "data.tokenizer=byte"),
        f"train.precision={'fp32' if args.cpu_smoke else 'bf16'}",
    ]
    (work / "fsdp").mkdir(parents=True, exist_ok=True)
    launch = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    out: dict = {"ranks": ranks}
    for parallel in ("ddp", "fsdp"):
        command = [
            *launch,
            f"--nproc_per_node={ranks}",
            *("-m", "training.train", *common, f"train.parallel={parallel}"),
            f"tracking.experiment=gpu-check-{parallel}",
            f"paths.runs_dir={work / 'fsdp' / parallel}",
        ]
        env = {**os.environ, "OMP_NUM_THREADS": "1"} if args.cpu_smoke else None
        t0 = time.perf_counter()
        proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, env=env)
        mlflow.set_tracking_uri(uri)
        runs = mlflow.search_runs(experiment_names=[f"gpu-check-{parallel}"])
        row = runs.iloc[0] if len(runs) else {}
        out[parallel] = {
            "returncode": proc.returncode,
            "wall_s": round(time.perf_counter() - t0, 1),
            "final_val_loss": row.get("metrics.final_val_loss"),
            "tokens_per_sec": row.get("metrics.tokens_per_sec"),
            "output_tail": (proc.stdout + proc.stderr)[-1500:],
        }
        if proc.returncode:
            return out | {"error": f"{parallel}: torchrun exited {proc.returncode}"}
    diff = abs(out["fsdp"]["final_val_loss"] - out["ddp"]["final_val_loss"])
    out["val_loss_diff"] = diff
    if diff > (1e-4 if args.cpu_smoke else 2e-2):
        out["error"] = f"fsdp's final val loss differs from ddp's by {diff:.3g}"
    return out


# memory first (seconds), the sweep last: its time limit is what the deadline leaves
PARTS = {
    "memory": memory_part,
    "throughput": throughput_part,
    "loop_overhead": loop_part,
    "moe": moe_part,
    "fsdp": fsdp_part,
    "sweep": sweep_part,
}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--cpu-smoke", action="store_true", help="tiny shapes on the CPU")
    p.add_argument("--parts", default=",".join(PARTS), help="comma-separated subset of the parts")
    p.add_argument("--peak-tflops", type=float, default=989.0, help="H100/H200 dense bf16")
    p.add_argument("--deadline-s", type=float, default=460.0, help="the sweep stops by then")
    p.add_argument("--out", default=os.environ.get("OUT") or str(ROOT / "results" / "benchmarks"))
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    if not args.cpu_smoke and not torch.cuda.is_available():
        raise SystemExit("error: no CUDA device; run with --cpu-smoke on a CPU")
    start, device = time.perf_counter(), torch.device("cpu" if args.cpu_smoke else "cuda")
    result: dict = {"machine": machine(device, torch.get_num_threads(), "system"), "parts": {}}
    command = argv if argv is not None else sys.argv[1:]
    result["command"] = "python -m benchmarks.gpu_check " + " ".join(command)
    out = Path(args.out) / f"gpu_check_{'cpu_smoke' if args.cpu_smoke else 'cuda'}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.parts.split(","):
            args.sweep_timeout = max(30.0, args.deadline_s - (time.perf_counter() - start))
            t0 = time.perf_counter()
            try:
                part = PARTS[name](args, Path(tmp))
            except Exception:  # the other parts still run; the JSON says what failed
                part = {"error": traceback.format_exc()[-3000:]}
            part["seconds"] = round(time.perf_counter() - t0, 1)
            result["parts"][name] = part
            status = "FAILED" if "error" in part else "ok"
            print(f"[gpu_check] {name}: {status} in {part['seconds']} s", flush=True)
            out.write_text(json.dumps(result, indent=1, default=str) + "\n")  # after each part
    print(f"[gpu_check] wrote {out}")
    if any("error" in p for p in result["parts"].values()):
        sys.exit(1)
    return result


if __name__ == "__main__":
    main()
