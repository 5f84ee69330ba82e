"""Where one training step spends its time: scaling-lab vs Hugging Face, op by op.

    python -m benchmarks.profile_step                         # llama+gpt2, d_model 128 and 256
    python -m benchmarks.profile_step --families llama --d-models 32 --top 15

Builds the same (model, AdamW, fixed batch) pairs as ``benchmarks.throughput`` (identical shape
and weights), warms them up, then profiles ``--steps`` full training steps of each with
``torch.profiler`` (CPU activities). Profiles of ours and HF alternate ``--reps`` times and the
per-op self time is the median over repetitions, so a load spike on a shared machine hits one
repetition, not one model. Prints, per shape: the step split into forward / loss / backward /
optimizer (record_function ranges), and the ops whose self time differs most between the two,
which is where one implementation spends time the other does not.
"""

from __future__ import annotations

import argparse
import statistics
from collections import defaultdict

import torch
from torch.profiler import ProfilerActivity, profile, record_function

from benchmarks.harness import Case, Runner, Shape, add_shape_args

PHASES = ("forward+loss", "backward", "optimizer")


def profile_once(runner: Runner, steps: int) -> tuple[dict[str, float], dict[str, float]]:
    """(self CPU ms per op name, ms per phase), averaged over ``steps`` steps."""
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            with record_function("forward+loss"):
                loss = runner.loss_fn(runner.x, runner.y)
            with record_function("backward"):
                loss.backward()
            with record_function("optimizer"):
                runner.opt.step()
                runner.opt.zero_grad(set_to_none=True)
        loss.item()
    ops, phases = {}, {}
    for e in prof.key_averages():
        if e.key in PHASES:
            phases[e.key] = e.cpu_time_total / 1e3 / steps
        else:
            ops[e.key] = e.self_cpu_time_total / 1e3 / steps
    return ops, phases


def compare(family: str, shape: Shape, args) -> str:
    runners = {
        impl: Runner(Case(family, impl, False, shape), torch.device("cpu"), "fp32")
        for impl in ("ours", "hf")
    }
    for r in runners.values():
        r.run(args.warmup)
    ops = {impl: defaultdict(list) for impl in runners}
    phases = {impl: defaultdict(list) for impl in runners}
    for _ in range(args.reps):
        for impl, r in runners.items():
            o, p = profile_once(r, args.steps)
            for k, v in o.items():
                ops[impl][k].append(v)
            for k, v in p.items():
                phases[impl][k].append(v)

    def med(d: dict, k: str) -> float:
        vals = d.get(k, [])
        return statistics.median(vals + [0.0] * (args.reps - len(vals))) if vals else 0.0

    lines = [
        f"## {family} d_model {shape.d_model} (layers {shape.layers}, seq {shape.seq}, "
        f"batch {shape.batch}, vocab {shape.vocab}); ms per step, median of {args.reps}"
    ]
    lines.append(f"{'phase':<24}{'ours':>10}{'hf':>10}{'hf-ours':>10}")
    for ph in PHASES:
        a, b = med(phases["ours"], ph), med(phases["hf"], ph)
        lines.append(f"{ph:<24}{a:>10.2f}{b:>10.2f}{b - a:>10.2f}")
    tot_a = sum(med(phases["ours"], ph) for ph in PHASES)
    tot_b = sum(med(phases["hf"], ph) for ph in PHASES)
    lines.append(f"{'step':<24}{tot_a:>10.2f}{tot_b:>10.2f}{tot_b - tot_a:>10.2f}")
    names = set(ops["ours"]) | set(ops["hf"])
    rows = [(k, med(ops["ours"], k), med(ops["hf"], k)) for k in names]
    lines.append(f"\n{'op (self time)':<48}{'ours':>10}{'hf':>10}{'hf-ours':>10}")
    for k, a, b in sorted(rows, key=lambda r: -max(r[1], r[2]))[: args.top]:
        lines.append(f"{k[:47]:<48}{a:>10.2f}{b:>10.2f}{b - a:>10.2f}")
    lines.append(f"\n{'largest differences':<48}")
    for k, a, b in sorted(rows, key=lambda r: -abs(r[2] - r[1]))[: args.top]:
        lines.append(f"{k[:47]:<48}{a:>10.2f}{b:>10.2f}{b - a:>10.2f}")
    return "\n".join(lines)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m benchmarks.profile_step")
    add_shape_args(p, d_models=[128, 256])
    p.add_argument("--reps", default=5, type=int)
    p.add_argument("--steps", default=1, type=int)
    p.add_argument("--warmup", default=2, type=int)
    p.add_argument("--threads", default=1, type=int)
    p.add_argument("--top", default=20, type=int)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    for d in args.d_models:
        for family in args.families:
            shape = Shape(args.vocab, d, args.layers, args.seq, args.batch)
            print(compare(family, shape, args) + "\n", flush=True)


if __name__ == "__main__":
    main()
