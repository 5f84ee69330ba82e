"""What the MoE layer's one-matmul dispatch buys over a Python loop over experts (CPU).

    python -m benchmarks.moe_dispatch --out results/benchmarks/moe_dispatch_cpu

One ``MoEMLP`` (models/moe.py) at three widths, forward + backward of a (batch, seq, d_model)
input, by three kernels on the same weights and routing:

- ``padded``: ours on CPU; tokens sorted by expert, every expert's rows padded to the largest
  load, one ``torch.bmm`` per projection;
- ``grouped``: ``torch._grouped_mm`` (what the layer picks on CUDA), run on CPU for reference;
- ``loop``: the per-expert Python loop of Hugging Face's Mixtral/Qwen2-MoE blocks (for each
  expert, gather its tokens, run its MLP, scatter-add the gated output).

The loads are ``balanced`` (a freshly initialised router) and ``skewed`` (inputs shifted to
raise expert 0's logit, so its load is several times the mean: the padded kernel pays for the
padding). Every repetition runs each kernel once, order reversed every other
repetition (``benchmarks.interleave``); the table reports the median over repetitions of
time(loop) / time(kernel), so slow drifts of a shared machine's load cancel. Before timing,
each kernel's output and input gradient are checked against ``loop`` (max abs difference).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from benchmarks.harness import machine
from benchmarks.interleave import median_ratio, repetitions
from models.config import ModelConfig
from models.moe import MoEMLP

KERNELS = ("loop", "padded", "grouped")


def moe_layer(d_model: int, n_experts: int, top_k: int) -> MoEMLP:
    """One MoE layer of a llama-style block (SwiGLU experts of the dense width), seeded."""
    torch.manual_seed(0)
    d_ff = 8 * round(8 * d_model / 3 / 8)  # SwiGLU's 8/3 d, a multiple of 8: 16-byte strides
    cfg = ModelConfig(
        d_model=d_model,
        n_layers=1,
        n_heads=4,
        mlp="moe",
        n_experts=n_experts,
        top_k=top_k,
        d_ff=d_ff,
    )
    layer = MoEMLP(cfg)
    return layer


def inputs(layer: MoEMLP, batch: int, seq: int, skewed: bool) -> torch.Tensor:
    """(batch, seq, d) standard normal; ``skewed`` adds the direction that raises expert 0's
    router logit by 2 for every token, so expert 0 takes most tokens' first choice."""
    torch.manual_seed(1)
    x = torch.randn(batch, seq, layer.router.weight.shape[1])
    if skewed:
        w0 = layer.router.weight[0].detach()
        x = x + 2.0 * w0 / w0.square().sum()
    return x


def loop_forward(layer: MoEMLP, x: torch.Tensor) -> torch.Tensor:
    """The per-expert loop over the layer's weights and routing: x (B, T, d) -> (B, T, d)."""
    B, T, d = x.shape
    x2 = x.reshape(B * T, d)
    _, idx, gates = layer.route(x2)  # (N, k) experts and gate weights
    out = torch.zeros_like(x2)
    first = layer.gate_up if layer.swiglu else layer.fc
    for e in range(layer.n_experts):
        token, slot = (idx == e).nonzero(as_tuple=True)  # the assignments to expert e
        if token.numel() == 0:
            continue
        h = x2[token] @ first.weight[e].T  # (n_e, 2f) or (n_e, f)
        if layer.swiglu:
            gate, up = h.chunk(2, dim=-1)
            h = F.silu(gate) * up
        else:
            h = F.gelu(h)
        y = (h @ layer.proj.weight[e].T) * gates[token, slot, None].to(x2.dtype)
        out.index_add_(0, token, y)
    if layer.shared is not None:
        out = out + layer.shared(x2)
    return out.view(B, T, d)


def forward(layer: MoEMLP, x: torch.Tensor, kernel: str) -> torch.Tensor:
    if kernel == "loop":
        return loop_forward(layer, x)
    layer.kernel = kernel
    return layer(x)


def step_seconds(layer: MoEMLP, x: torch.Tensor, kernel: str) -> float:
    """Seconds for one forward + backward (gradients of the input and every weight)."""
    x = x.detach().requires_grad_(True)
    layer.zero_grad(set_to_none=True)
    sync = torch.cuda.synchronize if x.is_cuda else (lambda: None)
    sync()
    start = time.perf_counter()
    forward(layer, x, kernel).float().square().mean().backward()
    sync()
    return time.perf_counter() - start


def max_diffs(layer: MoEMLP, x: torch.Tensor, kernel: str) -> tuple[float, float]:
    """Max abs difference of (output, input gradient) between ``kernel`` and ``loop``."""
    results = []
    for k in ("loop", kernel):
        xi = x.detach().requires_grad_(True)
        y = forward(layer, xi, k)
        y.float().square().mean().backward()
        results.append((y.detach(), xi.grad))
    (y0, g0), (y1, g1) = results
    return float((y0 - y1).abs().max()), float((g0 - g1).abs().max())


def compare(d_model: int, load: str, args, device=None, dtype=torch.float32) -> dict:
    """One width and load: outputs checked against the loop, then the interleaved timings;
    on ``device`` in ``dtype`` (the GPU check: CUDA, bf16, where ``grouped`` is the kernel
    the layer picks)."""
    layer = moe_layer(d_model, args.experts, args.top_k)
    x = inputs(layer, args.batch, args.seq, load == "skewed")
    layer, x = layer.to(device=device, dtype=dtype), x.to(device=device, dtype=dtype)
    with torch.no_grad():
        _, idx, _ = layer.route(x.reshape(-1, d_model))
        counts = torch.bincount(idx.reshape(-1), minlength=args.experts).float()
    row = {
        "d_model": d_model,
        "load": load,
        "max_over_mean_load": float(counts.max() / counts.mean()),
    }
    for kernel in KERNELS[1:]:
        row[f"max_diff_out_{kernel}"], row[f"max_diff_grad_{kernel}"] = max_diffs(layer, x, kernel)
    times: dict[str, list[float]] = {k: [] for k in KERNELS}
    for _ in range(args.warmup):
        for kernel in KERNELS:
            step_seconds(layer, x, kernel)
    for order in repetitions(KERNELS, args.reps):
        for kernel in order:
            times[kernel].append(step_seconds(layer, x, kernel))
    for kernel in KERNELS:
        row[f"ms_{kernel}"] = 1e3 * statistics.median(times[kernel])
    for kernel in KERNELS[1:]:
        row[f"speedup_{kernel}_vs_loop"] = median_ratio(times["loop"], times[kernel])
    return row


def table(rows: list[dict]) -> str:
    lines = [
        "| d_model | load | max/mean load | loop ms | padded ms | grouped ms "
        "| padded vs loop | grouped vs loop | max diff (padded, grouped) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        diff = max(r["max_diff_out_padded"], r["max_diff_grad_padded"])
        diff_g = max(r["max_diff_out_grouped"], r["max_diff_grad_grouped"])
        lines.append(
            f"| {r['d_model']} | {r['load']} | {r['max_over_mean_load']:.2f} "
            f"| {r['ms_loop']:.1f} | {r['ms_padded']:.1f} | {r['ms_grouped']:.1f} "
            f"| {r['speedup_padded_vs_loop']:.2f}x | {r['speedup_grouped_vs_loop']:.2f}x "
            f"| {diff:.1e}, {diff_g:.1e} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--d-models", default="64,128,256", help="comma-separated widths")
    p.add_argument("--experts", type=int, default=8)
    p.add_argument("--top-k", type=int, default=2)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--reps", type=int, default=15)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    p.add_argument("--out", default=None, help="write OUT.json and OUT.md")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    rows = [
        compare(int(d), load, args)
        for d in args.d_models.split(",")
        for load in ("balanced", "skewed")
    ]
    text = table(rows)
    print(text)
    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        meta = {
            "machine": machine(torch.device("cpu"), torch.get_num_threads(), "system"),
            "args": vars(args),
            "torch": torch.__version__,
        }
        out.with_suffix(".json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=2))
        command = "python -m benchmarks.moe_dispatch " + " ".join(
            f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items() if v is not None
        )
        header = (
            f"# MoE dispatch on CPU: one matmul per projection vs a loop over experts\n\n"
            f"`{command}`\n\n{args.experts} SwiGLU experts, top-{args.top_k}, batch "
            f"{args.batch} x {args.seq} tokens, forward + backward; speed-ups are medians of "
            f"per-repetition ratios (see benchmarks/moe_dispatch.py); 1-minute load average "
            f"at the end {meta['machine']['load_average_1m_at_end']:.1f} on "
            f"{meta['machine']['cores']} cores.\n\n"
        )
        out.with_suffix(".md").write_text(header + text + "\n")


if __name__ == "__main__":
    main()
