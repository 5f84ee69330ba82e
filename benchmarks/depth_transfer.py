"""Depth transfer: does the best learning rate stay put across depth? (results/depth_transfer)

    python -m benchmarks.depth_transfer                    # train what is missing, then analyse
    python -m benchmarks.depth_transfer --seed 1 --depths 2 16   # a second seed, added to runs.csv
    python -m benchmarks.depth_transfer --analyse-only     # figures and summary from runs.csv
    python -m benchmarks.depth_transfer --tokens 1e6 --out /tmp/dt  # another budget, own folder

Crosses SP, muP (width rules only) and CompleteP (``model.parametrization=completep``, base
depth ``BASE_DEPTH``, depth_alpha 1) x n_layers ``DEPTHS`` (one width, ``D_MODEL``, which is
also the muP base width, so only the depth rules differ between muP and CompleteP) x ``LRS``
(log-spaced, factor 2; ``--lrs``) at ``TOKENS`` tokens per run (``--tokens``) and trains every
point with ``training.train.train``, the public entry point, into the project's MLflow store and
runs folder. A rerun finds each FINISHED run by its
run key and reuses it, so an interrupted experiment resumes where it stopped. Points run
``--jobs`` at a time, one thread each. ``--seed S --depths ...`` trains the grid again with
``train.seed=S`` at those depths and merges the rows into runs.csv (by run key); the analysis
averages each point's loss over its seeds. ``train.tokens`` is in every run key and a column of
runs.csv, and a runs.csv holds one budget: training at another ``--tokens`` into the same
``--out`` stops with an error instead of mixing budgets.

Writes to ``--out``: ``runs.csv`` (one row per point: parametrization, n_layers, train.lr, loss =
final validation loss, N, N_total, D, C, ...), ``loss_vs_lr_{sp,mup,completep}.png`` (one line
per depth) and ``summary.json``: per parametrization and depth the best lr on the grid and
refined by a parabola in log lr (``benchmarks.mup_transfer.optimum``) through the seed-mean
losses, the spread max/min of those optima across depths (also in log2), what the base depth's
best grid lr costs at every other depth (its loss minus that depth's best), and the seed noise:
the median and largest |loss difference| between two seeds of one point.
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

from benchmarks.mup_transfer import one_thread, optimum

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DEPTHS = (2, 4, 8, 16)
BASE_DEPTH = 2
D_MODEL = 32
HEAD_DIM = 8
LRS = tuple(1.5e-3 * 2**k for k in range(6))  # 1.5e-3 .. 4.8e-2: 32x, around the 1e5 optima
TOKENS = 5e5  # per run (489 steps); at 1e5 (98 steps) every model sat on the unigram plateau
PARAMETRIZATIONS = ("sp", "mup", "completep")
NAMES = {
    "sp": "SP",
    "mup": "muP (width rules)",
    "completep": f"CompleteP (base depth {BASE_DEPTH})",
}
# Shared by every point: the llama block with MHA at d_model 32, bytes of the stdlib corpus.
FIXED = [
    "model=llama",
    f"model.d_model={D_MODEL}",
    f"model.n_heads={D_MODEL // HEAD_DIM}",
    "model.n_kv_heads=null",
    "data.tokenizer=byte",
    "train.seq_len=64",
    "train.batch_tokens=1024",
    "train.warmup=0.05",
    "train.eval_every=1000",
    "data.eval_tokens=32768",
    "train.log_every=50",
    "train.progress=none",
    "tracking.experiment=depth_transfer",
    "tracking.tags.sweep=depth_transfer",
]


def point_overrides(
    parametrization: str, n_layers: int, lr: float, seed: int = 0, tokens: float = TOKENS
) -> list[str]:
    # train.tokens is in the run key, so runs at different budgets are never reused for each
    # other; runs.csv carries it too and a table holds one budget (see ``merge_runs``).
    over = [f"model.n_layers={n_layers}", f"train.lr={lr:g}", f"train.tokens={tokens:g}"]
    if seed != 0:  # seed 0 is the default: its run keys stay those of the first grid
        over += [f"train.seed={seed}"]
    if parametrization != "sp":
        over += [f"model.parametrization={parametrization}", f"model.mup_base_width={D_MODEL}"]
    if parametrization == "completep":
        over += [f"model.mup_base_depth={BASE_DEPTH}"]
    return FIXED + over


Point = tuple[str, int, float, int, float]  # parametrization, n_layers, lr, seed, tokens


def train_point(point: Point) -> dict:
    """Train (or reuse) one point; its row of runs.csv."""
    # Hydra, torch and MLflow in the workers only: `--analyse-only` needs none of them.
    from hydra import compose, initialize_config_dir

    from models import count_params, flops_per_token
    from training.spec import resolve_config
    from training.train import train

    parametrization, n_layers, lr, seed, tokens = point
    over = point_overrides(parametrization, n_layers, lr, seed, tokens)
    with initialize_config_dir(str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=over)
    spec = resolve_config(cfg)
    result = train(cfg)
    pc = count_params(spec.model)
    steps = math.ceil(spec.train.tokens / spec.train.batch_tokens)
    D = steps * spec.train.batch_tokens
    loss = result.final_val_loss
    return {
        "parametrization": parametrization,
        "n_layers": n_layers,
        "d_model": spec.model.d_model,
        "train.lr": lr,
        "train.seed": seed,
        "train.tokens": spec.train.tokens,
        "loss": loss if loss is not None and math.isfinite(loss) else float("nan"),
        "final_train_loss": result.final_train_loss,
        "status": result.status,
        "N": pc.non_embedding,
        "N_total": pc.total,
        "D": D,
        "C": 6 * pc.non_embedding * D,
        "C_exact": flops_per_token(spec.model, spec.train.seq_len).exact * D,
        "mup_base_width": spec.model.mup_base_width,
        "mup_base_depth": spec.model.mup_base_depth,
        "depth_alpha": spec.model.depth_alpha if parametrization == "completep" else None,
        "run_key": result.run_key,
        "wall_time_s": result.wall_time_s,
    }


def run_all(points: list[Point], jobs: int) -> list[dict]:
    rows, t0 = [], time.perf_counter()
    ctx = get_context("spawn")
    with ProcessPoolExecutor(jobs, mp_context=ctx, initializer=one_thread) as pool:
        for i, row in enumerate(pool.map(train_point, points), 1):
            rows.append(row)
            print(
                f"[{i}/{len(points)} {time.perf_counter() - t0:6.0f}s] "
                f"{row['parametrization']:9s} L={row['n_layers']:<3d} lr={row['train.lr']:<8g} "
                f"seed={row['train.seed']} "
                f"loss={row['loss']:.4f} {row['status']} {row['wall_time_s']:.1f}s",
                flush=True,
            )
    return rows


def all_points(depths=DEPTHS, seed: int = 0, tokens: float = TOKENS, lrs=LRS) -> list[Point]:
    # Deepest first: the long runs start early and the short ones fill the gaps at the end.
    return [
        (p, L, lr, seed, tokens)
        for L in sorted(depths, reverse=True)
        for p in PARAMETRIZATIONS
        for lr in lrs
    ]


# ----- analysis: pure functions of the runs table --------------------------------------------
def summarise(rows: list[dict], base_depth: int = BASE_DEPTH, tolerance: float = 0.0) -> dict:
    """Per parametrization: each depth's optimum, the lrs whose loss is within ``tolerance`` of
    it (``near_best_lrs``: with the seed noise as tolerance, the lrs the data cannot tell from
    the best), the spread of the optima across depths, and the regret of transferring the base
    depth's best grid lr (loss there minus the best)."""
    summary = {}
    for p in sorted({r["parametrization"] for r in rows}, key=_order):
        per_depth = {}
        for L in sorted({r["n_layers"] for r in rows if r["parametrization"] == p}):
            pts = [r for r in rows if r["parametrization"] == p and r["n_layers"] == L]
            losses = seed_means(pts)
            per_depth[L] = optimum(list(losses), list(losses.values()))
            per_depth[L]["seeds"] = len({r.get("train.seed", 0) for r in pts})
            per_depth[L]["losses"] = losses
        base_lr = per_depth[base_depth]["best_lr_grid"]
        for w in per_depth.values():
            losses = w.pop("losses")
            w["regret_of_base_lr"] = losses.get(base_lr, math.nan) - w["best_loss"]
            w["near_best_lrs"] = [lr for lr, v in losses.items() if v <= w["best_loss"] + tolerance]
        grid = [w["best_lr_grid"] for w in per_depth.values()]
        refined = [w["best_lr_refined"] for w in per_depth.values()]
        summary[p] = {
            "depths": per_depth,
            "spread_grid": max(grid) / min(grid),  # max/min optimal lr across depths
            "spread_refined": max(refined) / min(refined),
            "log2_spread_refined": math.log2(max(refined) / min(refined)),
            "any_at_edge": any(w["at_edge"] for w in per_depth.values()),
        }
    return summary


def seed_means(points: list[dict]) -> dict[float, float]:
    """lr -> the mean final loss over the seeds trained at that lr (NaN if any diverged)."""
    by_lr: dict[float, list[float]] = {}
    for r in points:
        by_lr.setdefault(r["train.lr"], []).append(r["loss"])
    return {lr: sum(v) / len(v) for lr, v in sorted(by_lr.items())}


def seed_noise(rows: list[dict]) -> dict:
    """|loss difference| between seeds 0 and 1 of the same point, over every such pair."""
    key = lambda r: (r["parametrization"], r["n_layers"], r["train.lr"])  # noqa: E731
    first = {key(r): r["loss"] for r in rows if r.get("train.seed", 0) == 0}
    diffs = sorted(
        abs(r["loss"] - first[key(r)])
        for r in rows
        if r.get("train.seed", 0) == 1 and key(r) in first
    )
    diffs = [d for d in diffs if math.isfinite(d)]
    if not diffs:
        return {"pairs": 0}
    return {
        "pairs": len(diffs),
        "median_abs_diff": diffs[len(diffs) // 2],
        "max_abs_diff": diffs[-1],
    }


def _order(parametrization: str) -> int:
    return PARAMETRIZATIONS.index(parametrization) if parametrization in PARAMETRIZATIONS else 99


def plot(rows: list[dict], summary: dict, out: Path, noise: float | None = None) -> None:
    """One loss-vs-lr figure per parametrization; ``noise`` (the median seed difference) goes
    into the title next to the spread, which means little when the curves differ by less."""
    finite = [r["loss"] for r in rows if math.isfinite(r["loss"])]
    ylim = (min(finite) - 0.05, min(max(finite), min(finite) + 1.5) + 0.05)
    lrs = sorted({r["train.lr"] for r in rows})
    for p, s in summary.items():
        fig, ax = plt.subplots(figsize=(6, 4.2))
        cmap = plt.get_cmap("viridis")
        depths = list(s["depths"])
        for k, L in enumerate(depths):
            pts = [r for r in rows if r["parametrization"] == p and r["n_layers"] == L]
            means = seed_means(pts)
            color = cmap(k / max(1, len(depths) - 1))
            seeds = s["depths"][L]["seeds"]
            label = f"{L} layers" + (f" (mean of {seeds} seeds)" if seeds > 1 else "")
            ax.plot(list(means), list(means.values()), "o-", color=color, label=label)
            if seeds > 1:  # each seed's own loss, small
                ax.plot([r["train.lr"] for r in pts], [r["loss"] for r in pts], ".", color=color)
            best = s["depths"][L]
            ax.plot(best["best_lr_grid"], best["best_loss"], "*", color=color, markersize=14)
        ax.set(
            xscale="log",
            xlabel="train.lr (peak)",
            ylabel="final validation loss (nats per byte)",
            ylim=ylim,
            title=f"{NAMES.get(p, p)}: optimal-lr spread {s['spread_refined']:.2f}x"
            + (
                "" if noise is None else f"\nseed noise {noise:.2f} nats (median |seed 0 - seed 1|)"
            ),
        )
        ax.set_xticks(lrs, [f"{lr:g}" for lr in lrs], rotation=30)
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.grid(alpha=0.3)
        ax.legend()
        fig.tight_layout()
        fig.savefig(out / f"loss_vs_lr_{p}.png", dpi=120)
        plt.close(fig)


def merge_runs(old: pd.DataFrame | None, new: pd.DataFrame) -> pd.DataFrame:
    """``new`` plus the rows of ``old`` it does not retrain (other seeds and depths), sorted.
    A table holds one budget: rows at another ``train.tokens`` (or a table from before the
    column, all at 1e5) are refused rather than averaged with these."""
    if old is None:
        return new.sort_values(["parametrization", "n_layers", "train.lr", "train.seed"])
    old_tokens = set(old["train.tokens"]) if "train.tokens" in old else {1e5}
    if old_tokens != set(new["train.tokens"]):
        raise SystemExit(
            f"error: train.tokens: runs.csv holds {sorted(old_tokens)}, these runs "
            f"{sorted(set(new['train.tokens']))}; use another --out"
        )
    frame = pd.concat([old[~old["run_key"].isin(new["run_key"])], new])
    return frame.sort_values(["parametrization", "n_layers", "train.lr", "train.seed"])


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "depth_transfer")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--analyse-only", action="store_true", help="read runs.csv, train nothing")
    ap.add_argument("--only", help="train one point PARAM:LAYERS:LR (sizing), write nothing")
    ap.add_argument("--seed", type=int, default=0, help="train.seed of the points to train")
    ap.add_argument("--depths", type=int, nargs="+", default=list(DEPTHS))
    ap.add_argument("--tokens", type=float, default=TOKENS, help="train.tokens of every run")
    ap.add_argument("--lrs", type=float, nargs="+", default=list(LRS), help="peak lr grid")
    args = ap.parse_args()
    if args.tokens <= 0 or not math.isfinite(args.tokens):
        ap.exit(2, f"error: --tokens: must be a positive number, got {args.tokens:g}\n")
    if any(lr <= 0 or not math.isfinite(lr) for lr in args.lrs):
        ap.exit(2, "error: --lrs: every lr must be a positive number\n")
    return args


def main() -> None:
    args = parse_args()
    if args.only:
        p, L, lr = args.only.split(":")
        print(run_all([(p, int(L), float(lr), args.seed, args.tokens)], 1)[0])
        return
    args.out.mkdir(parents=True, exist_ok=True)
    csv = args.out / "runs.csv"
    old = pd.read_csv(csv) if csv.exists() else None
    if old is not None and "train.seed" not in old:  # a table of seed 0 only
        old.insert(old.columns.get_loc("train.lr") + 1, "train.seed", 0)
    if args.analyse_only:
        frame = old
    else:
        points = all_points(args.depths, args.seed, args.tokens, tuple(args.lrs))
        frame = merge_runs(old, pd.DataFrame(run_all(points, args.jobs)))
        frame.to_csv(csv, index=False)
    rows = frame.to_dict("records")
    noise = seed_noise(rows)
    summary = summarise(rows, tolerance=noise.get("median_abs_diff", 0.0))
    plot(rows, summary, args.out, noise.get("median_abs_diff"))
    text = json.dumps({**summary, "seed_noise": noise}, indent=2)
    (args.out / "summary.json").write_text(text + "\n")
    print("seed noise:", noise)
    for p, s in summary.items():
        best = ", ".join(f"L{L}: {w['best_lr_refined']:.3g}" for L, w in s["depths"].items())
        print(
            f"{p}: optimal lr {best}; spread {s['spread_refined']:.2f}x "
            f"(log2 {s['log2_spread_refined']:.2f}; grid {s['spread_grid']:.1f}x)"
            f"{' (an optimum at the grid edge)' if s['any_at_edge'] else ''}"
        )


if __name__ == "__main__":
    main()
