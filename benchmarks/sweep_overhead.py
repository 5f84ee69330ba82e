"""Sweep overhead: wall time of a tiny sweep vs the sum of its runs' own training time.

    python -m benchmarks.sweep_overhead                 # conf/sweep/tiny.yaml, 4 runs
    python -m benchmarks.sweep_overhead --sweep demo --jobs 2

Runs ``python -m sweeps.run sweep=NAME`` in a fresh process twice, with a runs dir and data
cache in a temporary folder, so everything a user pays for counts: process start, imports,
MLflow logging, checkpoints.

- ``first_store``: against a brand-new MLflow SQLite store and an empty token cache (what the
  very first sweep on a machine pays: schema migrations, tokenising the corpus).
- ``existing_store``: the same sweep again into another experiment of the store the first one
  created, with the token cache it built: the realistic case, a researcher's ``mlruns.db`` and
  cache exist. Fresh runs dir, so every run trains again.
- ``store_creation_s``: creating a new store (``training.tracking.ensure_experiment`` on a new
  SQLite file) in a process that has already imported MLflow: the first store's extra cost.

Each run's ``wall_time_s`` metric (training loop + final evaluation, logged by
``training.train``) is its training time; overhead = 1 - sum(training time) / sweep wall time
(with ``--jobs 1``). Writes ``<out>/sweep_overhead.json``.
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

import mlflow

ROOT = Path(__file__).resolve().parents[1]
STORE_TIMER = """
import sys, time
from training import tracking
import mlflow.store.tracking.sqlalchemy_store  # imports are not the store's cost
t0 = time.perf_counter()
tracking.ensure_experiment(sys.argv[1], "scaling-lab")
print(time.perf_counter() - t0)
"""


def run_sweep(sweep: str, jobs: int, extra: list[str], env: dict, uri: str) -> dict:
    cmd = [sys.executable, "-m", "sweeps.run", f"sweep={sweep}", f"sweep.jobs={jobs}", *extra]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(
            f"sweep failed ({' '.join(cmd)}):\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}"
        )
    experiment = next(
        (a.split("=", 1)[1] for a in extra if a.startswith("tracking.experiment=")), "scaling-lab"
    )
    mlflow.set_tracking_uri(uri)
    runs = mlflow.search_runs(experiment_names=[experiment])
    runs = runs[runs["metrics.wall_time_s"].notna()]  # children (the parent has none)
    train_s = runs["metrics.wall_time_s"].astype(float).tolist()
    total = sum(train_s)
    return {
        "runs": len(train_s),
        "sweep_wall_s": wall,
        "sum_train_s": total,
        "overhead_fraction": 1 - total / wall if jobs == 1 else None,
        "overhead_per_run_s": (wall - total) / len(train_s) if jobs == 1 else None,
        "train_s": train_s,
        "command": " ".join(cmd[1:]),
    }


def measure(sweep: str, jobs: int, extra: list[str]) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        uri = f"sqlite:///{tmp}/mlruns.db"
        env = {**os.environ, "MLFLOW_TRACKING_URI": uri, "SCALING_LAB_CACHE_DIR": f"{tmp}/cache"}
        first = run_sweep(sweep, jobs, extra, {**env, "SCALING_LAB_RUNS_DIR": f"{tmp}/runs1"}, uri)
        again = [*extra, "tracking.experiment=sweep-overhead-existing-store"]
        existing = run_sweep(
            sweep, jobs, again, {**env, "SCALING_LAB_RUNS_DIR": f"{tmp}/runs2"}, uri
        )
        timer = [sys.executable, "-c", STORE_TIMER, f"sqlite:///{tmp}/new/mlruns.db"]
        out = subprocess.run(timer, cwd=ROOT, capture_output=True, text=True, check=True)
        store_s = float(out.stdout.strip().splitlines()[-1])
    return {
        "sweep": sweep,
        "jobs": jobs,
        "first_store": first,
        "existing_store": existing,
        "store_creation_s": store_s,
        "load_average_1m": os.getloadavg()[0],
    }


def _line(name: str, r: dict) -> str:
    line = f"  {name}: {r['runs']} runs, wall {r['sweep_wall_s']:.1f}s, "
    line += f"sum of training {r['sum_train_s']:.1f}s"
    if r["overhead_fraction"] is not None:
        line += (
            f", overhead {100 * r['overhead_fraction']:.0f}% ({r['overhead_per_run_s']:.1f}s/run)"
        )
    return line


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
    print(f"sweep {r['sweep']} (jobs {r['jobs']}):")
    print(_line("first store  ", r["first_store"]))
    print(_line("existing store", r["existing_store"]))
    print(f"  creating a new MLflow store: {r['store_creation_s']:.1f}s")
    return r


if __name__ == "__main__":
    main()
