"""Fit timing: approach 3 over Hoffmann's full 4,500-start grid, and bootstrap refits.

    python -m benchmarks.fit_timing [--points 300] [--bootstrap 1000] [--repeats 3]

Prints a table and writes results/benchmarks/fit_timing.json with the machine description.
Synthetic runs from Hoffmann et al.'s law with 1% noise (analysis.data.synthetic.grid_runs).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

import numpy as np
import pandas as pd
import scipy

from analysis.data.synthetic import HOFFMANN, grid_runs
from analysis.fits import laws
from analysis.fits.bootstrap import resample_counts
from analysis.fits.laws import base, chinchilla


def _timed(fn, repeats):
    walls, cpus, out = [], [], None
    for _ in range(repeats):
        w, c = time.perf_counter(), time.process_time()
        out = fn()
        walls.append(time.perf_counter() - w)
        cpus.append(time.process_time() - c)
    return out, min(walls), min(cpus)


def machine() -> dict:
    model = ""
    if Path("/proc/cpuinfo").exists():
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return {
        "cpu": model or platform.processor(),
        "cores": os.cpu_count(),
        "load_avg_1m_at_start": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "scipy": scipy.__version__,
        "platform": platform.platform(),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--points", type=int, default=300)
    ap.add_argument("--bootstrap", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default="results/benchmarks/fit_timing.json")
    args = ap.parse_args(argv)
    info = machine()
    rows, fit, thetas = _synthetic_timings(args.points, args.bootstrap, args.repeats)
    ladder_row, section = _ladder_timing(args.bootstrap, args.repeats)
    rows.append(ladder_row)
    result = {
        "machine": info,
        "repeats": args.repeats,
        "timing": "best of repeats",
        "rows": rows,
        "fit": {k: getattr(fit, k) for k in ("E", "A", "B", "alpha", "beta", "objective")},
        "bootstrap_converged": int(np.isfinite(thetas[:, 0]).sum()),
        "ladder_bootstrap_converged": section["n_boot_converged"],
    }
    print(f"{'task':<62} {'wall s':>8} {'cpu s':>8}")
    for r in rows:
        print(f"{r['task']:<62} {r['wall_s']:>8.2f} {r['cpu_s']:>8.2f}")
    print(f"machine: {info['cpu']}, {info['cores']} cores, load {info['load_avg_1m_at_start']}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")
    return 0


def _synthetic_timings(points: int, bootstrap: int, repeats: int):
    """Time the full-grid fit and the bootstrap refits on a synthetic Hoffmann ladder: the two
    rows, the fit and the replicates' parameters."""
    runs = grid_runs(HOFFMANN, n=points, noise=0.01, seed=0)
    N, D, L = runs["N"], runs["D"], runs["loss"]
    fit, grid_wall, grid_cpu = _timed(lambda: chinchilla.fit(N, D, L), repeats)
    counts = resample_counts(len(runs), bootstrap, seed=0)
    (thetas, _), boot_wall, boot_cpu = _timed(
        lambda: base.bootstrap(
            chinchilla.LAW,
            {"N": N, "D": D},
            L,
            counts,
            np.vstack([fit.theta[None, :], chinchilla.BOOTSTRAP_STARTS]),
        ),
        repeats,
    )
    rows = [
        {
            "task": f"approach 3, full grid ({len(chinchilla.hoffmann_grid())} starts), "
            f"{points} points",
            "wall_s": grid_wall,
            "cpu_s": grid_cpu,
        },
        {
            "task": f"{bootstrap} bootstrap refits (warm + 9 grid starts), {points} points",
            "wall_s": boot_wall,
            "cpu_s": boot_cpu,
        },
    ]
    return rows, fit, thetas


def _ladder_timing(bootstrap: int, repeats: int) -> tuple[dict, dict]:
    """What a user waits for on a real ladder: the whole approach-3 section (grid fit, every
    replicate from its own starts, identification) on the committed reference ladder."""
    ladder = pd.read_csv(Path(__file__).parent.parent / "results" / "ref_ladder_v2" / "runs.csv")
    (_, section, _), ladder_wall, ladder_cpu = _timed(
        lambda: laws.approach3(ladder, [1e13], bootstrap, 0), repeats
    )
    row = {
        "task": f"approach 3 + {bootstrap} refits, ref_ladder_v2 ({len(ladder)} runs)",
        "wall_s": ladder_wall,
        "cpu_s": ladder_cpu,
    }
    return row, section


if __name__ == "__main__":
    raise SystemExit(main())
