"""Training throughput, MFU and peak memory: scaling-lab models vs Hugging Face at equal shapes.

    python -m benchmarks.throughput                      # CPU fp32, d_model 128 and 256
    python -m benchmarks.throughput --compile eager      # skip torch.compile (faster)
    python -m benchmarks.throughput --device cuda --dtype bf16 --d-models 768 --layers 12 \
        --seq 1024 --batch 8 --peak-tflops 989           # see benchmarks/gpu_check.sh

What is measured, per family (``llama``, ``gpt2``), d_model and mode (eager / torch.compile):
our preset (``conf/model/<family>.yaml`` with the shape overridden) against the
``transformers`` model the exporter maps it to (``LlamaForCausalLM`` / ``GPT2LMHeadModel``), so
vocab, d_model, layers, heads, KV heads, FFN width, tying and biases are identical; both start
from the same weights. One step = forward, mean cross-entropy over every position (ours: the
training path ``model(x, y, return_logits=False)``, a chunked head + loss that never builds the
logits; HF: its logits and ``F.cross_entropy``, with ``use_cache=False``), backward, AdamW step
(fused when the device supports it, else foreach; weight decay on matrices only), with bf16
autocast when ``--dtype bf16``. All models live in one process with the same thread count;
each repetition times every model in turn, in an order reversed every other repetition
(``benchmarks.interleave``), and the median repetition is reported.

- tokens/s = batch * seq * steps / wall time of the timed steps (host-synced at the end only),
  median over repetitions; the ratio ours/HF is the median of the per-repetition ratios (each
  pair ran back to back), which is robust to other processes loading the machine.
- MFU = ``models.flops_per_token(cfg, seq).exact`` * tokens/s / peak, with the peak measured on
  the spot in every repetition (best of 5 n=1024 matmuls in the same dtype; MFU is the median
  of the per-repetition ratios), or ``--peak-tflops``.
- Peak memory on CPU: each model runs again in a fresh subprocess (same imports, same steps);
  we report the peak RSS (VmHWM) above that process's RSS after imports, so the models cannot
  see each other's allocations. On CUDA: ``torch.cuda.max_memory_allocated`` during the model's
  steps, minus what other resident models hold.
- ``--malloc``: the host allocator both models run under. ``system`` (default) is the C
  library's behaviour, what a plain training script gets; ``keep`` is what ``training.train`` sets
  on the CPU (glibc keeps freed blocks: no page faults to re-touch a step's big tensors). Code
  that allocates fresh logit-sized tensors every step gains most from ``keep``, so report both.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch

from benchmarks.harness import (
    FAMILIES,
    ROOT,
    Case,
    Runner,
    Shape,
    add_shape_args,
    log,
    machine,
    preset_config,
    probe_memory,
    set_malloc,
)
from benchmarks.interleave import median_ratio, repetitions
from models import flops_per_token
from training.monitor import matmul_peak_flops


# ----- the benchmark ----------------------------------------------------------------------------
def benchmark(args) -> dict:
    device = torch.device(args.device)
    set_malloc(args.malloc)
    threads = args.threads or os.cpu_count()
    torch.set_num_threads(threads)
    load = os.getloadavg()[0]
    if device.type == "cpu" and threads > 1 and load > 0.5:
        # Busy cores deschedule OpenMP workers and every parallel region waits for them, so
        # multi-threaded numbers measure the scheduler (docs/performance.md, single measurements).
        log(f"warning: load average {load:.1f} with {threads} threads: consider --threads 1")
    cases = _cases(args)
    times, peaks, memory = _measure(cases, device, threads, args)
    peak = args.peak_tflops * 1e12 if args.peak_tflops else statistics.median(peaks)
    rep_peaks = None if args.peak_tflops else peaks
    rows = [_row(case, times[case], peak, rep_peaks, memory.get(case), args) for case in cases]
    _add_ratios(rows)
    return {
        "machine": machine(device, threads, args.malloc),
        "settings": {k: v for k, v in vars(args).items() if k != "out"},
        "peak_flops": peak,
        "peak_source": "given"
        if args.peak_tflops
        else "median over repetitions of the best of 5 n=1024 matmuls",
        "memory_method": (
            "peak RSS above post-import RSS, fresh subprocess per model"
            if device.type == "cpu"
            else "torch.cuda.max_memory_allocated minus other models' resident bytes"
        ),
        "rows": rows,
    }


def _cases(args) -> list[Case]:
    modes = {"eager": [False], "compiled": [True], "both": [False, True]}[args.compile]
    return [
        Case(family, impl, compiled, Shape(args.vocab, d, args.layers, args.seq, args.batch))
        for d in args.d_models
        for family in args.families
        for compiled in modes
        for impl in ("ours", "hf")
    ]


def _measure(cases: list[Case], device, threads: int, args) -> tuple[dict, list, dict]:
    """({case: seconds per repetition}, [matmul peak per repetition], {case: peak MB})."""
    runners = {}
    for case in cases:
        t0 = time.perf_counter()
        runners[case] = r = Runner(case, device, args.dtype, args.sdpa)
        r.run(args.warmup)  # compiles, allocates optimizer state
        log(f"ready {case.label} ({time.perf_counter() - t0:.1f}s incl. warm-up)")
    times, peaks, memory = {case: [] for case in cases}, [], {}
    # Interleaved: every model (and the matmul peak) once per repetition.
    for rep, order in enumerate(repetitions(cases, args.reps)):
        if not args.peak_tflops:
            peaks.append(matmul_peak_flops(device, _torch_dtype(args.dtype), n=1024))
        for case in order:
            if device.type == "cuda" and rep == args.reps - 1:
                torch.cuda.reset_peak_memory_stats(device)
                resident = torch.cuda.memory_allocated(device) - runners[case].static_bytes()
            times[case].append(runners[case].run(args.steps))
            if device.type == "cuda" and rep == args.reps - 1:
                memory[case] = (torch.cuda.max_memory_allocated(device) - resident) / 2**20
    if device.type == "cpu" and args.memory:
        del runners
        for case in cases:
            memory[case] = probe_memory(
                case, args.dtype, threads, args.warmup, args.steps, args.malloc
            )
            log(f"memory {case.label}: {memory[case]:.0f} MB")
    return times, peaks, memory


def _row(case: Case, times: list, peak: float, rep_peaks: list | None, mem, args) -> dict:
    s = case.shape
    sec = statistics.median(times) / args.steps
    flops = _flops_per_token(case)
    # MFU per repetition against that repetition's matmul peak (same load), then median.
    rep_peaks = rep_peaks or [peak] * len(times)
    mfu = statistics.median(
        flops * s.batch * s.seq * args.steps / t / p for t, p in zip(times, rep_peaks)
    )
    return {
        "family": case.family,
        "d_model": s.d_model,
        "mode": "compiled" if case.compiled else "eager",
        "impl": case.impl,
        "tokens_per_s": s.batch * s.seq / sec,
        "ms_per_step": 1e3 * sec,
        "mfu": mfu,
        "peak_mem_mb": mem,
        "step_times_s": [t / args.steps for t in times],
    }


def _add_ratios(rows: list[dict]) -> None:
    for row in rows:
        if row["impl"] == "ours":
            hf = next(r for r in rows if r["impl"] == "hf" and _key(r) == _key(row))
            # Paired: HF and ours ran back to back in each repetition, so the median of the
            # per-repetition ratios cancels slow drifts in machine load.
            row["ratio"] = median_ratio(hf["step_times_s"], row["step_times_s"])
            if row["peak_mem_mb"] is not None:
                row["mem_ratio"] = row["peak_mem_mb"] / hf["peak_mem_mb"]


def _torch_dtype(dtype: str):
    return torch.bfloat16 if dtype == "bf16" else torch.float32


def _key(row: dict) -> tuple:
    return row["family"], row["d_model"], row["mode"]


def _flops_per_token(case: Case) -> int:
    return flops_per_token(preset_config(case.family, case.shape), case.shape.seq).exact


def table(result: dict) -> str:
    head = "| model | d_model | mode | impl | tokens/s | ms/step | MFU | peak mem MB | ours/HF |"
    lines = [head, "|" + "---|" * 9]
    for r in result["rows"]:
        mem = "-" if r["peak_mem_mb"] is None else f"{r['peak_mem_mb']:.0f}"
        ratio = f"{r['ratio']:.2f}x" if "ratio" in r else ""
        lines.append(
            f"| {r['family']} | {r['d_model']} | {r['mode']} | {r['impl']} | "
            f"{r['tokens_per_s']:,.0f} | {r['ms_per_step']:.1f} | {100 * r['mfu']:.1f}% | "
            f"{mem} | {ratio} |"
        )
    return "\n".join(lines)


def worst_line(result: dict) -> str:
    ours = [r for r in result["rows"] if "ratio" in r]
    w = min(ours, key=lambda r: r["ratio"])
    return (
        f"worst ratio ours/HF: {w['ratio']:.2f}x ({w['family']} d{w['d_model']} {w['mode']}); "
        f"best MFU ours: {100 * max(r['mfu'] for r in ours):.1f}%"
    )


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.throughput", description=__doc__.split("\n")[0]
    )
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--dtype", default="fp32", choices=["fp32", "bf16"])
    add_shape_args(p, d_models=[128, 256])
    p.add_argument("--compile", default="both", choices=["eager", "compiled", "both"])
    p.add_argument("--reps", default=9, type=int, help="interleaved repetitions (median)")
    p.add_argument("--steps", default=2, type=int, help="training steps per timed repetition")
    p.add_argument("--warmup", default=2, type=int, help="untimed steps per model first")
    p.add_argument(
        "--sdpa",
        default="default",
        choices=["default", "flash"],
        help="flash: allow only the flash SDPA kernel (fails instead of falling back)",
    )
    p.add_argument("--threads", default=0, type=int, help="torch threads (0: all cores)")
    p.add_argument("--peak-tflops", default=0.0, type=float, help="datasheet peak (0: measure)")
    p.add_argument(
        "--malloc",
        default="system",
        choices=["system", "keep"],
        help="host allocator for both models: C library defaults | keep freed blocks (training.train)",
    )
    p.add_argument("--no-memory", dest="memory", action="store_false", help="skip RSS probes (CPU)")
    p.add_argument("--out", default=str(ROOT / "results" / "benchmarks"), help="output directory")
    p.add_argument("--name", default=None, help="output file stem (default throughput_<device>)")
    args = p.parse_args(argv)
    for f in args.families:
        if f not in FAMILIES:
            p.error(f"--families: unknown family {f!r}; choose from {', '.join(FAMILIES)}")
    if min(args.d_models) < 1 or args.reps < 1 or args.steps < 1 or args.warmup < 0:
        p.error("--d-models, --reps and --steps must be positive, --warmup >= 0")
    return args


def main(argv=None) -> dict:
    command = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(argv)
    result = benchmark(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = args.name or f"throughput_{args.device}"
    text = table(result)
    (out / f"{stem}.json").write_text(json.dumps(result, indent=2) + "\n")
    m = result["machine"]
    desc = ", ".join(f"{k} {v}" for k, v in m.items())
    (out / f"{stem}.md").write_text(
        f"# Training throughput: scaling-lab vs transformers ({args.device}, {args.dtype})\n\n"
        f"Command: `python -m benchmarks.throughput {' '.join(command)}`\n\n"
        f"Machine: {desc}.\n\nPeak: {result['peak_flops'] / 1e9:.1f} GFLOP/s ({result['peak_source']}). "
        f"Memory: {result['memory_method']}.\n\n"
        f"Shape: vocab {args.vocab}, {args.layers} layers, seq {args.seq}, batch {args.batch}; "
        f"median of {args.reps} interleaved repetitions of {args.steps} steps.\n\n"
        f"{text}\n\n{worst_line(result)}\n"
    )
    print(text)
    print(worst_line(result))
    return result


if __name__ == "__main__":
    main()
