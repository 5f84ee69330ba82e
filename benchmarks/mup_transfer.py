"""muP transfer: does the best learning rate stay put across width? (results/mup_transfer)

    python -m benchmarks.mup_transfer                      # train what is missing, then analyse
    python -m benchmarks.mup_transfer --analyse-only       # figures and summary from runs.csv

Crosses SP and muP (``model.parametrization``, muP base width ``BASE_WIDTH``) x d_model
``WIDTHS`` (fixed depth and head dim) x ``LRS`` (log-spaced, factor 2) and trains every point
with ``training.train.train``, the public entry point, into the project's MLflow store and runs
folder. A rerun finds each FINISHED run by its run key and reuses it, so an interrupted
experiment resumes where it stopped. Points run ``--jobs`` at a time, one thread each (tiny
models: separate processes use two cores better than two intra-op threads).

Writes to ``--out``: ``runs.csv`` (one row per point: parametrization, d_model, train.lr, loss =
final validation loss, N, N_total, D, C, ...), ``loss_vs_lr_sp.png`` and ``loss_vs_lr_mup.png``
(one line per width), and ``summary.json``: per parametrization and width the best lr on the
grid and refined by a parabola through the best point and its neighbours in log lr, and the
spread max/min of those optima across widths.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

import matplotlib
import pandas as pd

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
WIDTHS = (16, 32, 64, 128)
HEAD_DIM = 8
BASE_WIDTH = 16
LRS = tuple(7.5e-4 * 2**k for k in range(7))  # 7.5e-4 .. 4.8e-2: 64x
PARAMETRIZATIONS = ("sp", "mup")
# Shared by every point: the llama block with MHA at depth 2, bytes of the stdlib corpus.
FIXED = [
    "model=llama",
    "model.n_layers=2",
    "model.n_kv_heads=null",
    "data.tokenizer=byte",
    "train.seq_len=64",
    "train.batch_tokens=1024",
    "train.tokens=1.5e5",
    "train.warmup=0.05",
    "train.eval_every=1000",
    "data.eval_tokens=32768",
    "train.log_every=50",
    "train.progress=none",
    "tracking.experiment=mup_transfer",
    "tracking.tags.sweep=mup_transfer",
]


def point_overrides(parametrization: str, d_model: int, lr: float) -> list[str]:
    over = [f"model.d_model={d_model}", f"model.n_heads={d_model // HEAD_DIM}", f"train.lr={lr:g}"]
    if parametrization == "mup":
        over += ["model.parametrization=mup", f"model.mup_base_width={BASE_WIDTH}"]
    return FIXED + over


# Torch, Hydra and MLflow are imported by the workers only: `--analyse-only` (what
# results/regenerate.sh runs) needs none of them.
def one_thread() -> None:
    import torch

    torch.set_num_threads(1)


def train_point(point: tuple[str, int, float]) -> dict:
    """Train (or reuse) one point; its row of runs.csv."""
    from hydra import compose, initialize_config_dir

    from models import count_params, flops_per_token
    from training.spec import resolve_config
    from training.train import train

    parametrization, d_model, lr = point
    with initialize_config_dir(str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=point_overrides(parametrization, d_model, lr))
    spec = resolve_config(cfg)
    result = train(cfg)
    pc = count_params(spec.model)
    steps = math.ceil(spec.train.tokens / spec.train.batch_tokens)
    D = steps * spec.train.batch_tokens
    loss = result.final_val_loss
    return {
        "parametrization": parametrization,
        "d_model": d_model,
        "n_heads": spec.model.n_heads,
        "n_layers": spec.model.n_layers,
        "train.lr": lr,
        "loss": loss if loss is not None and math.isfinite(loss) else float("nan"),
        "final_train_loss": result.final_train_loss,
        "status": result.status,
        "N": pc.non_embedding,
        "N_total": pc.total,
        "D": D,
        "C": 6 * pc.non_embedding * D,
        "C_exact": flops_per_token(spec.model, spec.train.seq_len).exact * D,
        "mup_base_width": BASE_WIDTH if parametrization == "mup" else None,
        "run_key": result.run_key,
        "wall_time_s": result.wall_time_s,
    }


def run_all(jobs: int) -> list[dict]:
    # Widest first: the long runs start early and the short ones fill the gaps at the end.
    points = [
        (p, d, lr) for d in sorted(WIDTHS, reverse=True) for p in PARAMETRIZATIONS for lr in LRS
    ]
    rows, t0 = [], time.perf_counter()
    ctx = get_context("spawn")
    with ProcessPoolExecutor(jobs, mp_context=ctx, initializer=one_thread) as pool:
        for i, row in enumerate(pool.map(train_point, points), 1):
            rows.append(row)
            print(
                f"[{i}/{len(points)} {time.perf_counter() - t0:6.0f}s] {row['parametrization']:3s} "
                f"d={row['d_model']:<4d} lr={row['train.lr']:<8g} loss={row['loss']:.4f} {row['status']}",
                flush=True,
            )
    return rows


# ----- analysis: pure functions of the runs table --------------------------------------------
def optimum(lrs: list[float], losses: list[float]) -> dict:
    """Best lr on the grid and refined by a parabola in log2(lr) through it and its two
    neighbours (the grid point itself when it is at the edge or the parabola is not convex)."""
    finite = [(lr, loss) for lr, loss in sorted(zip(lrs, losses)) if math.isfinite(loss)]
    i = min(range(len(finite)), key=lambda j: finite[j][1])
    best = finite[i][0]
    out = {
        "best_lr_grid": best,
        "best_loss": finite[i][1],
        "at_edge": i in (0, len(finite) - 1),
        "best_lr_refined": best,
    }
    if not out["at_edge"]:
        (x0, y0), (x1, y1), (x2, y2) = [(math.log2(a), b) for a, b in finite[i - 1 : i + 2]]
        # Vertex of the parabola through three points (x spacing need not be equal).
        den = (x0 - x1) * (x0 - x2) * (x1 - x2)
        a = (x2 * (y1 - y0) + x1 * (y0 - y2) + x0 * (y2 - y1)) / den
        b = (x2**2 * (y0 - y1) + x1**2 * (y2 - y0) + x0**2 * (y1 - y2)) / den
        if a > 0:
            out["best_lr_refined"] = 2 ** (-b / (2 * a))
    return out


def summarise(rows: list[dict]) -> dict:
    summary = {}
    for p in PARAMETRIZATIONS:
        per_width = {}
        for d in WIDTHS:
            pts = [r for r in rows if r["parametrization"] == p and r["d_model"] == d]
            per_width[d] = optimum([r["train.lr"] for r in pts], [r["loss"] for r in pts])
        grid = [w["best_lr_grid"] for w in per_width.values()]
        refined = [w["best_lr_refined"] for w in per_width.values()]
        summary[p] = {
            "widths": per_width,
            "spread_grid": max(grid) / min(grid),  # max/min optimal lr across widths
            "spread_refined": max(refined) / min(refined),
            "any_at_edge": any(w["at_edge"] for w in per_width.values()),
        }
    return summary


def plot(rows: list[dict], summary: dict, out: Path) -> None:
    finite = [r["loss"] for r in rows if math.isfinite(r["loss"])]
    ylim = (min(finite) - 0.05, min(max(finite), min(finite) + 1.5) + 0.05)
    for p in PARAMETRIZATIONS:
        fig, ax = plt.subplots(figsize=(6, 4.2))
        cmap = plt.get_cmap("viridis")
        for k, d in enumerate(WIDTHS):
            pts = sorted(
                (r["train.lr"], r["loss"])
                for r in rows
                if r["parametrization"] == p and r["d_model"] == d
            )
            color = cmap(k / max(1, len(WIDTHS) - 1))
            ax.plot(
                [a for a, _ in pts], [b for _, b in pts], "o-", color=color, label=f"d_model {d}"
            )
            best = summary[p]["widths"][d]
            ax.plot(best["best_lr_grid"], best["best_loss"], "*", color=color, markersize=14)
        name = {"sp": "SP", "mup": f"muP (base width {BASE_WIDTH})"}[p]
        ax.set(
            xscale="log",
            xlabel="train.lr (peak)",
            ylabel="final validation loss (nats/byte)",
            ylim=ylim,
            title=f"{name}: optimal-lr spread {summary[p]['spread_refined']:.2f}x",
        )
        ax.set_xticks(LRS, [f"{lr:g}" for lr in LRS], rotation=30)
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.grid(alpha=0.3)
        ax.legend()
        fig.tight_layout()
        fig.savefig(out / f"loss_vs_lr_{p}.png", dpi=120)
        plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "mup_transfer")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--analyse-only", action="store_true", help="read runs.csv, train nothing")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.analyse_only:
        rows = pd.read_csv(args.out / "runs.csv").to_dict("records")
    else:
        rows = run_all(args.jobs)
        frame = pd.DataFrame(rows).sort_values(["parametrization", "d_model", "train.lr"])
        frame.to_csv(args.out / "runs.csv", index=False)
    summary = summarise(rows)
    plot(rows, summary, args.out)
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    for p, s in summary.items():
        best = ", ".join(f"d{d}: {w['best_lr_refined']:.3g}" for d, w in s["widths"].items())
        print(
            f"{p}: optimal lr {best}; spread {s['spread_refined']:.2f}x "
            f"(grid {s['spread_grid']:.1f}x){' (an optimum at the grid edge)' if s['any_at_edge'] else ''}"
        )


if __name__ == "__main__":
    main()
