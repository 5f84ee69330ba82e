"""What keeping freed host memory (``train.keep_host_memory``, training/hostmem.py) buys a CPU step.

    python -m benchmarks.allocator --d-models 32,128,256 --reps 5

The allocator setting is process-wide and cannot be undone, so unlike ``benchmarks.ab_step``
the two variants cannot share a process: every repetition runs one fresh child process per
setting (``system``: the C library's defaults; ``keep``: freed blocks kept), order flipped
every repetition, and the reported speed-up is the median over repetitions of the
per-repetition ratio ``time(system) / time(keep)``. Each child is ``benchmarks.throughput``'s
fresh-process probe (same models, shape and step: forward, loss, backward, AdamW): ``--warmup``
steps, then ``--steps`` timed, reporting ms per step and peak RSS above the post-import RSS.
Both our model and the Hugging Face one are measured, since code that allocates fresh
logit-sized tensors every step gains most.
"""

from __future__ import annotations

import argparse
import json
import statistics

import torch

from benchmarks.harness import Case, Shape, int_list, machine, probe
from benchmarks.interleave import median_ratio, repetitions


def compare(family: str, impl: str, d_model: int, args) -> dict:
    """Median ms/step and peak MB per setting, and the median speed-up of ``keep``."""
    runs = {"system": [], "keep": []}
    for order in repetitions(runs, args.reps):
        for malloc in order:
            case = Case(family, impl, False, Shape(4096, d_model, 4, 256, 8))
            runs[malloc].append(probe(case, "fp32", args.threads, args.warmup, args.steps, malloc))
    row = {"family": family, "impl": impl, "d_model": d_model}
    for malloc, results in runs.items():
        row[f"ms_{malloc}"] = statistics.median(r["ms_per_step"] for r in results)
        row[f"peak_mb_{malloc}"] = statistics.median(r["peak_mb"] for r in results)
    row["speedup_keep"] = median_ratio(
        [r["ms_per_step"] for r in runs["system"]], [r["ms_per_step"] for r in runs["keep"]]
    )
    return row


def main(argv=None) -> list[dict]:
    p = argparse.ArgumentParser(prog="python -m benchmarks.allocator")
    p.add_argument("--d-models", default=[32, 128, 256], type=int_list)
    p.add_argument("--families", default=["llama", "gpt2"], type=lambda s: s.split(","))
    p.add_argument("--impls", default=["ours", "hf"], type=lambda s: s.split(","))
    p.add_argument("--reps", default=5, type=int, help="child-process pairs per row (median)")
    p.add_argument("--steps", default=4, type=int, help="timed steps per child")
    p.add_argument("--warmup", default=2, type=int)
    p.add_argument("--threads", default=1, type=int)
    p.add_argument("--out", default=None, help="write the rows as JSON here")
    args = p.parse_args(argv)
    if args.reps < 1 or args.steps < 1 or args.warmup < 1:
        p.error("--reps, --steps and --warmup must be positive")
    print(
        "| model | impl | d_model | ms/step system | ms/step keep | keep speed-up "
        "| peak MB system | peak MB keep |\n|---|---|---|---|---|---|---|---|"
    )
    rows = []
    for d in args.d_models:
        for family in args.families:
            for impl in args.impls:
                r = compare(family, impl, d, args)
                rows.append(r)
                print(
                    f"| {family} | {impl} | {d} | {r['ms_system']:.1f} | {r['ms_keep']:.1f} "
                    f"| {r['speedup_keep']:.3f}x | {r['peak_mb_system']:.0f} "
                    f"| {r['peak_mb_keep']:.0f} |",
                    flush=True,
                )
    if args.out:
        info = machine(torch.device("cpu"), args.threads, "system vs keep")
        with open(args.out, "w") as f:
            json.dump({"args": vars(args), "machine": info, "rows": rows}, f, indent=2)
            f.write("\n")
    return rows


if __name__ == "__main__":
    main()
