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
import platform
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from benchmarks.interleave import median_ratio, repetitions
from training.hostmem import keep_freed_memory

ROOT = Path(__file__).resolve().parents[1]
FAMILIES = ("llama", "gpt2")


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
def model_config(family: str, shape: Shape):
    """Our preset with the benchmark shape: head_dim 32 at d_model 128, else 64; Llama keeps
    its preset's GQA ratio (2 query heads per KV head)."""
    import yaml

    from models import ModelConfig

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


def build(case: Case, device):
    """(model, step function) on ``device``, float32 weights, train mode."""
    import torch
    import torch.nn.functional as F

    from models import build_model
    from models.export_hf import to_hf

    cfg = model_config(case.family, case.shape)
    torch.manual_seed(0)
    ours = build_model(cfg)
    model = ours if case.impl == "ours" else to_hf(ours)
    if case.impl == "hf":
        model.config.use_cache = False
    model = model.to(device).train()
    forward = torch.compile(model) if case.compiled else model
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}]
    try:
        opt = torch.optim.AdamW(groups, lr=1e-4, fused=True)
    except (RuntimeError, TypeError):
        opt = torch.optim.AdamW(groups, lr=1e-4, foreach=True)

    def loss_fn(x, y):
        if case.impl == "ours":
            return forward(x, y, return_logits=False)[1]  # what training.train calls
        logits = forward(input_ids=x, use_cache=False).logits  # (B, T, V)
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), y.view(-1))

    return model, opt, loss_fn, cfg


class Runner:
    """One model, its optimizer and a fixed batch; ``run(n)`` does n training steps."""

    def __init__(self, case: Case, device, dtype: str, sdpa: str = "default"):
        import contextlib

        import torch
        from torch.nn.attention import SDPBackend, sdpa_kernel

        self.case, self.device = case, device
        self.model, self.opt, self.loss_fn, self.cfg = build(case, device)
        g = torch.Generator().manual_seed(0)
        s = case.shape
        tokens = torch.randint(0, s.vocab, (s.batch, s.seq + 1), generator=g).to(device)
        self.x, self.y = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
        self.autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=dtype == "bf16")
        flash = [SDPBackend.FLASH_ATTENTION]
        self.sdpa = (lambda: sdpa_kernel(flash)) if sdpa == "flash" else contextlib.nullcontext

    def run(self, steps: int) -> float:
        """Seconds for ``steps`` training steps (one host sync, at the end)."""
        import torch

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


# ----- peak FLOP/s and memory -------------------------------------------------------------------
def measured_peak_flops(device, dtype: str, n: int = 1024, reps: int = 5) -> float:
    """Best FLOP/s of an n x n x n matmul in the benchmark dtype (a practical, not datasheet, peak)."""
    import torch

    dt = torch.bfloat16 if dtype == "bf16" else torch.float32
    a, b = (torch.randn(n, n, device=device, dtype=dt) for _ in range(2))
    best = float("inf")
    for _ in range(reps):
        if device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        c = a @ b
        if device.type == "cuda":
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t0)
    del c
    return 2 * n**3 / best


def _proc_status_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def probe(case: Case, dtype: str, threads: int, warmup: int, steps: int, malloc: str) -> dict:
    """``case``'s training steps in a fresh Python process, so no other model's allocations (or
    allocator setting) count: {"peak_mb": peak RSS above the RSS after imports, "ms_per_step":
    mean of the ``steps`` timed steps after ``warmup``}."""
    payload = json.dumps({"case": asdict(case), "dtype": dtype, "threads": threads,
                          "warmup": warmup, "steps": steps, "malloc": malloc})  # fmt: skip
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.throughput", "--probe", payload],
        cwd=ROOT, capture_output=True, text=True, check=False,
    )  # fmt: skip
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
    import torch
    import transformers  # noqa: F401  (both implementations pay the same imports)

    import models  # noqa: F401

    p = json.loads(payload)
    set_malloc(p["malloc"])
    torch.set_num_threads(p["threads"])
    case = Case(**{**p["case"], "shape": Shape(**p["case"]["shape"])})
    base_kb = _proc_status_kb("VmRSS")
    runner = Runner(case, torch.device("cpu"), p["dtype"])
    runner.run(p["warmup"])
    seconds = runner.run(p["steps"])
    print(json.dumps({"peak_mb": (_proc_status_kb("VmHWM") - base_kb) / 1024,
                      "ms_per_step": 1e3 * seconds / p["steps"]}))  # fmt: skip


# ----- the benchmark ----------------------------------------------------------------------------
def machine(device, threads: int, malloc: str) -> dict:
    import torch
    import transformers

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


def benchmark(args) -> dict:
    import torch

    device = torch.device(args.device)
    set_malloc(args.malloc)
    threads = args.threads or os.cpu_count()
    torch.set_num_threads(threads)
    load = os.getloadavg()[0]
    if device.type == "cpu" and threads > 1 and load > 0.5:
        # Measured on a shared 2-core VM: with both cores busy elsewhere, every parallel region
        # waits for a descheduled OpenMP worker (a 64x64 matmul took 15.7 ms with 2 threads vs
        # 22 us with 1), so multi-threaded numbers measure the scheduler, not the model.
        log(f"warning: load average {load:.1f} with {threads} threads: consider --threads 1")
    modes = {"eager": [False], "compiled": [True], "both": [False, True]}[args.compile]
    cases = [
        Case(family, impl, compiled, Shape(args.vocab, d, args.layers, args.seq, args.batch))
        for d in args.d_models
        for family in args.families
        for compiled in modes
        for impl in ("ours", "hf")
    ]

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
            peaks.append(measured_peak_flops(device, args.dtype))
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

    peak = args.peak_tflops * 1e12 if args.peak_tflops else statistics.median(peaks)
    rows = []
    for case in cases:
        s = case.shape
        sec = statistics.median(times[case]) / args.steps
        tps = s.batch * s.seq / sec
        flops = _flops_per_token(case)
        # MFU per repetition against that repetition's matmul peak (same load), then median.
        rep_peaks = [peak] * len(times[case]) if args.peak_tflops else peaks
        mfu = statistics.median(
            flops * s.batch * s.seq * args.steps / t / p for t, p in zip(times[case], rep_peaks)
        )
        rows.append({
            "family": case.family, "d_model": s.d_model, "mode": "compiled" if case.compiled else "eager",
            "impl": case.impl, "tokens_per_s": tps, "ms_per_step": 1e3 * sec,
            "mfu": mfu, "peak_mem_mb": memory.get(case),
            "step_times_s": [t / args.steps for t in times[case]],
        })  # fmt: skip
    for row in rows:
        if row["impl"] == "ours":
            hf = next(r for r in rows if r["impl"] == "hf" and _key(r) == _key(row))
            # Paired: HF and ours ran back to back in each repetition, so the median of the
            # per-repetition ratios cancels slow drifts in machine load.
            row["ratio"] = median_ratio(hf["step_times_s"], row["step_times_s"])
            if row["peak_mem_mb"] is not None:
                row["mem_ratio"] = row["peak_mem_mb"] / hf["peak_mem_mb"]
    return {
        "machine": machine(device, threads, args.malloc),
        "settings": {k: v for k, v in vars(args).items() if k not in ("probe", "out")},
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


def _key(row: dict) -> tuple:
    return row["family"], row["d_model"], row["mode"]


def _flops_per_token(case: Case) -> int:
    from models import flops_per_token

    return flops_per_token(model_config(case.family, case.shape), case.shape.seq).exact


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


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.throughput", description=__doc__.split("\n")[0]
    )
    ints = lambda s: [int(v) for v in s.split(",")]  # noqa: E731
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--dtype", default="fp32", choices=["fp32", "bf16"])
    p.add_argument("--families", default=list(FAMILIES), type=lambda s: s.split(","))
    p.add_argument("--d-models", default=[128, 256], type=ints)
    p.add_argument("--layers", default=4, type=int)
    p.add_argument("--seq", default=256, type=int)
    p.add_argument("--batch", default=8, type=int)
    p.add_argument("--vocab", default=4096, type=int)
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
        "--malloc", default="system", choices=["system", "keep"],
        help="host allocator for both models: C library defaults | keep freed blocks (training.train)",
    )  # fmt: skip
    p.add_argument("--no-memory", dest="memory", action="store_false", help="skip RSS probes (CPU)")
    p.add_argument("--out", default=str(ROOT / "results" / "benchmarks"), help="output directory")
    p.add_argument("--name", default=None, help="output file stem (default throughput_<device>)")
    p.add_argument("--probe", default=None, help=argparse.SUPPRESS)  # internal: memory probe
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
    if args.probe:
        _probe_main(args.probe)
        return {}
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
