"""Is ``torch.compile`` worth it for a training run? Step speed-up and compile time, per preset.

    python -m benchmarks.compile_cost                              # CPU, llama+gpt2, d 32,128
    python -m benchmarks.compile_cost --d-models 256 --reps 7

For every (family, d_model), with the ``benchmarks.throughput`` shapes and step (our training
path: forward + chunked loss, backward, fused AdamW):

- ``speedup``: eager vs compiled step time in one process, interleaved, median of ``--reps``
  per-repetition ratios (robust to other load on the machine); > 1 means compiled is faster.
- ``compile_cold_s``: the first compiled step minus a steady compiled step, in a fresh process
  with an empty inductor cache (``TORCHINDUCTOR_CACHE_DIR`` in a temporary folder): what the
  first run of a new shape pays.
- ``compile_warm_s``: the same in a second fresh process sharing that cache (inductor's FX graph
  cache and AOTAutograd cache hit; Dynamo still traces): what every later run of a sweep pays.
- ``compile_same_process_s``: a second model of the same shape compiled in the first process
  (a sweep of several runs in one worker process).
- ``break_even_steps``: compile_warm_s / (eager step - compiled step): the steps a run needs
  before compiling pays for itself (None when compiled is not faster).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from benchmarks.harness import ROOT, Case, Runner, Shape, add_shape_args
from benchmarks.interleave import median_ratio, repetitions


def _first_step_s(case: Case, device) -> tuple[float, Runner]:
    t0 = time.perf_counter()
    runner = Runner(case, device, "fp32")
    runner.run(1)  # compiles
    first = time.perf_counter() - t0
    steady = min(runner.run(1) for _ in range(2))
    return max(first - steady, 0.0), runner


def child(payload: dict) -> dict:
    """In a fresh process: compile time, then (if asked) the in-process numbers."""
    torch.set_num_threads(payload["threads"])
    device = torch.device(payload["device"])
    shape = Shape(**payload["shape"])
    family = payload["family"]
    compiled = Case(family, "ours", True, shape)
    compile_s, runner = _first_step_s(compiled, device)
    out = {"compile_s": compile_s}
    if not payload["measure"]:
        return out
    out["compile_same_process_s"], _ = _first_step_s(compiled, device)
    eager = Runner(Case(family, "ours", False, shape), device, "fp32")
    eager.run(1)
    runners = {"eager": eager, "compiled": runner}
    times = {name: [] for name in runners}
    for order in repetitions(runners, payload["reps"]):
        for name in order:
            times[name].append(runners[name].run(payload["steps"]) / payload["steps"])
    out["eager_step_s"] = statistics.median(times["eager"])
    out["compiled_step_s"] = statistics.median(times["compiled"])
    out["speedup"] = median_ratio(times["eager"], times["compiled"])
    return out


def _spawn(payload: dict, cache_dir: str) -> dict:
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache_dir, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "benchmarks.compile_cost", "--child", json.dumps(payload)]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"compile_cost child failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def measure(family: str, shape: Shape, args) -> dict:
    payload = {
        "family": family,
        "shape": vars(shape),
        "device": args.device,
        "threads": args.threads,
        "reps": args.reps,
        "steps": args.steps,
    }
    with tempfile.TemporaryDirectory(prefix="inductor-cache-") as cache:
        cold = _spawn({**payload, "measure": True}, cache)
        warm = _spawn({**payload, "measure": False}, cache)
    saved = cold["eager_step_s"] - cold["compiled_step_s"]
    return {
        "family": family,
        "d_model": shape.d_model,
        "eager_ms": 1e3 * cold["eager_step_s"],
        "compiled_ms": 1e3 * cold["compiled_step_s"],
        "speedup": cold["speedup"],
        "compile_cold_s": cold["compile_s"],
        "compile_warm_s": warm["compile_s"],
        "compile_same_process_s": cold["compile_same_process_s"],
        "break_even_steps": round(warm["compile_s"] / saved) if saved > 0 else None,
    }


def main(argv=None) -> list[dict]:
    p = argparse.ArgumentParser(prog="python -m benchmarks.compile_cost")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    add_shape_args(p, d_models=[32, 128])
    p.add_argument("--reps", default=7, type=int)
    p.add_argument("--steps", default=1, type=int)
    p.add_argument("--threads", default=1, type=int)
    p.add_argument("--out", default=None, help="also write the rows as JSON here")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(child(json.loads(args.child))))
        return []
    rows = []
    head = "| model | d_model | eager ms | compiled ms | speedup | compile cold s | warm s | same process s | break-even steps |"  # noqa: E501
    print(head + "\n|" + "---|" * 9, flush=True)
    for d in args.d_models:
        for family in args.families:
            r = measure(family, Shape(args.vocab, d, args.layers, args.seq, args.batch), args)
            rows.append(r)
            print(
                f"| {family} | {d} | {r['eager_ms']:.1f} | {r['compiled_ms']:.1f} | "
                f"{r['speedup']:.2f}x | {r['compile_cold_s']:.1f} | {r['compile_warm_s']:.1f} | "
                f"{r['compile_same_process_s']:.1f} | {r['break_even_steps']} |",
                flush=True,
            )
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=2) + "\n")
    return rows


if __name__ == "__main__":
    main()
