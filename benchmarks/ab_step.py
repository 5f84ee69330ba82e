"""Interleaved A/B of one training-step choice, in one process (robust to other load).

    python -m benchmarks.ab_step loss --d-models 32,128,256   # logits + loss vs chunked loss
    python -m benchmarks.ab_step adamw --d-models 32,128      # fused vs foreach AdamW step
    python -m benchmarks.ab_step loop --size 2e4              # training.train loop body vs torch

Each variant runs ``--inner`` steps per repetition, variants alternate (order flipped every
repetition), and the reported speed-up is the median over ``--reps`` of the per-repetition
ratio ``time(first variant) / time(variant)``: > 1 means faster than the first variant.

- ``loss``: the full step (forward, loss, backward, fused AdamW) of ``benchmarks.harness``'s
  models with ``model(x, y)`` (logits + ``cross_entropy``) vs ``model(x, y,
  return_logits=False)`` (chunked ``linear_cross_entropy``), same model and batch.
- ``adamw``: ``AdamW.step`` alone, fused vs foreach, on the same gradients.
- ``loop``: ``training.train``'s loop body through Accelerate's optimizer and clipping wrappers
  vs stepping and clipping with torch directly (what ``training.step.step_and_clip`` picks on CPU), on the
  tiny sweep model (``--size``, byte vocabulary, seq 64, batch 32); checks the parameters end
  bit-identical.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import yaml
from accelerate import Accelerator

from benchmarks.harness import ROOT, Case, Runner, Shape, int_list
from benchmarks.interleave import median_ratio, repetitions
from models import build_model
from models.ladder import model_config
from training.step import step_and_clip


def ab(variants: dict, reps: int, inner: int, warmup: int = 2) -> dict[str, tuple[float, float]]:
    """{name: (median ms per call, median speed-up vs the first variant)}; prints a table."""
    for f in variants.values():
        for _ in range(warmup):
            f()
    times = {k: [] for k in variants}
    for order in repetitions(variants, reps):
        for k in order:
            t0 = time.perf_counter()
            for _ in range(inner):
                variants[k]()
            times[k].append((time.perf_counter() - t0) / inner)
    base = next(iter(variants))
    out = {}
    for k in variants:
        ratio = median_ratio(times[base], times[k])
        out[k] = (1e3 * statistics.median(times[k]), ratio)
        print(f"  {k:<36} {out[k][0]:9.2f} ms   {ratio:.3f}x", flush=True)
    return out


def _runner(family: str, d: int):
    return Runner(
        Case(family, "ours", False, Shape(4096, d, 4, 256, 8)), torch.device("cpu"), "fp32"
    )


def loss(args) -> None:
    for d in args.d_models:
        for family in ("llama", "gpt2"):
            r = _runner(family, d)

            def step(return_logits: bool, r=r):
                def f():
                    r.model(r.x, r.y, return_logits=return_logits)[1].backward()
                    r.opt.step()
                    r.opt.zero_grad(set_to_none=True)

                return f

            print(f"{family} d_model {d}")
            ab(
                {"logits + cross_entropy": step(True), "return_logits=False": step(False)},
                args.reps,
                args.inner,
            )


def adamw(args) -> None:
    for d in args.d_models:
        r = _runner("llama", d)
        params = [p for p in r.model.parameters()]
        opts = {}
        for fused in (True, False):
            copies = [p.detach().clone().requires_grad_() for p in params]
            for c in copies:
                c.grad = torch.randn_like(c)
            opts[fused] = torch.optim.AdamW(copies, lr=1e-4, fused=fused, foreach=not fused)
        print(f"AdamW.step, llama d_model {d}")
        ab({"fused": opts[True].step, "foreach": opts[False].step}, args.reps, args.inner)


def loop(args) -> None:
    preset = yaml.safe_load((ROOT / "conf" / "model" / "llama.yaml").read_text())
    cfg = model_config({**preset, "vocab_size": 256, "max_seq_len": 64, "size": args.size})
    g = torch.Generator().manual_seed(0)
    x, y = torch.randint(0, 256, (2, 32, 64), generator=g)
    accelerator = Accelerator(mixed_precision="no")

    def make():
        torch.manual_seed(0)
        model = build_model(cfg)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), fused=True)
        return accelerator.prepare(model, opt)

    def body(model, step_opt, clip):
        params = list(model.parameters())

        def f():
            with accelerator.accumulate(model):
                accelerator.backward(model(x, y, return_logits=False)[1])
                if accelerator.sync_gradients:
                    clip(params, 1.0)
                    step_opt.step()
                    step_opt.zero_grad(set_to_none=True)

        return f

    m1, o1 = make()
    m2, o2 = make()
    print(f"loop body, d_model {cfg.d_model}, {cfg.n_layers} layers")
    ab(
        {
            "Accelerate wrappers": body(m1, o1, accelerator.clip_grad_norm_),
            "torch directly (step_and_clip)": body(m2, *step_and_clip(accelerator, o2)),
        },
        args.reps,
        args.inner,
    )
    same = all(torch.equal(a, b) for a, b in zip(m1.parameters(), m2.parameters()))
    print(f"  parameters bit-identical after the same steps: {same}")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m benchmarks.ab_step")
    p.add_argument("experiment", choices=["loss", "adamw", "loop"])
    p.add_argument("--d-models", default=[32, 128, 256], type=int_list)
    p.add_argument("--size", default=2e4, type=float, help="loop: model.size of the tiny model")
    p.add_argument("--reps", default=9, type=int)
    p.add_argument("--inner", default=None, type=int, help="steps per repetition")
    p.add_argument("--threads", default=1, type=int)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    args.inner = args.inner or {"loss": 1, "adamw": 10, "loop": 10}[args.experiment]
    {"loss": loss, "adamw": adamw, "loop": loop}[args.experiment](args)


if __name__ == "__main__":
    main()
