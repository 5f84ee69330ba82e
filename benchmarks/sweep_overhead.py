"""Sweep overhead: wall time of a tiny sweep vs the sum of its runs' own training time.

    python -m benchmarks.sweep_overhead                 # conf/sweep/tiny.yaml, 4 runs
    python -m benchmarks.sweep_overhead --sweep demo --jobs 2

Runs ``python -m sweeps.run sweep=NAME`` in a fresh process against a fresh MLflow store, runs
dir and data cache (all in a temporary folder), so everything a user pays for counts: process
start, imports, tokenising the corpus into the cache, MLflow logging, checkpoints. Each run's
``wall_time_s`` metric (training loop + final evaluation, logged by ``sweeps.train``) is its
training time; overhead = 1 - sum(training time) / sweep wall time (with ``--jobs 1``).
Writes ``results/benchmarks/sweep_overhead.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def measure(sweep: str, jobs: int, extra: list[str]) -> dict:
    import mlflow

    with tempfile.TemporaryDirectory() as tmp:
        uri = f"sqlite:///{tmp}/mlruns.db"
        env = {**os.environ, "MLFLOW_TRACKING_URI": uri, "SCALING_LAB_RUNS_DIR": f"{tmp}/runs",
               "SCALING_LAB_CACHE_DIR": f"{tmp}/cache"}  # fmt: skip
        cmd = [sys.executable, "-m", "sweeps.run", f"sweep={sweep}", f"sweep.jobs={jobs}", *extra]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        if proc.returncode != 0:
            raise SystemExit(
                f"sweep failed ({' '.join(cmd)}):\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}"
            )
        mlflow.set_tracking_uri(uri)
        runs = mlflow.search_runs(search_all_experiments=True)
        runs = runs[runs["metrics.wall_time_s"].notna()]  # children (the parent has none)
        train_s = runs["metrics.wall_time_s"].astype(float).tolist()
    total = sum(train_s)
    return {
        "sweep": sweep,
        "jobs": jobs,
        "runs": len(train_s),
        "sweep_wall_s": wall,
        "sum_train_s": total,
        "overhead_fraction": 1 - total / wall if jobs == 1 else None,
        "overhead_per_run_s": (wall - total) / len(train_s) if jobs == 1 else None,
        "train_s": train_s,
        "command": " ".join(cmd[1:]),
        "load_average_1m": os.getloadavg()[0],
    }


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(prog="python -m benchmarks.sweep_overhead")
    p.add_argument("--sweep", default="tiny")
    p.add_argument("--jobs", type=int, default=1)
    p.add_argument("--out", default=str(ROOT / "results" / "benchmarks"))
    p.add_argument("overrides", nargs="*", help="extra Hydra overrides for sweeps.run")
    args = p.parse_args(argv)
    r = measure(args.sweep, args.jobs, args.overrides)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "sweep_overhead.json").write_text(json.dumps(r, indent=2) + "\n")
    line = f"sweep {r['sweep']}: {r['runs']} runs, wall {r['sweep_wall_s']:.1f}s, "
    line += f"sum of training {r['sum_train_s']:.1f}s"
    if r["overhead_fraction"] is not None:
        line += (
            f", overhead {100 * r['overhead_fraction']:.0f}% ({r['overhead_per_run_s']:.1f}s/run)"
        )
    print(line)
    return r


if __name__ == "__main__":
    main()
