"""Report speed: `python -m analysis.report` on the committed demo, end to end, timed.

    python -m benchmarks.report_speed [--baseline-tree /path/to/old/checkout] [--repeats 1]

Each run is a fresh process (imports, fits, figures: what a user waits for); wall time and the
child's CPU time (user + sys, steadier than wall on a shared machine) are recorded with the load
average. With --baseline-tree, that checkout's `analysis` is timed in the same process,
alternating with this one, and the ratio is printed; the two reports' .md/.json/.csv outputs are
compared byte for byte. Writes results/benchmarks/report_speed.md. A baseline tree needs only
the old `analysis` package: `git archive COMMIT analysis | tar -x -C /tmp/base`.
"""

from __future__ import annotations

import argparse
import filecmp
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ARGS = [
    "--csv", "results/demo/runs.csv",
    "--curves", "results/demo/curves.csv",
    "--compare", "arch",
    "--baseline", "pre-rmsnorm-rope-gqa2-swiglu",
    "--tune", "train.lr",
    "--tune", "train.warmup",
    "--title", "scaling-lab",
]  # fmt: skip
TEXT_OUTPUTS = ("report.md", "fit.json", "runs.csv")


def run_report(tree: Path, out: Path) -> tuple[float, float]:
    """(wall s, CPU s) of one report from `tree`'s analysis package on the demo CSVs."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "analysis.report", *ARGS, "--out", str(out)],
        cwd=ROOT,
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline-tree", type=Path, help="an older checkout to time alongside")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--out", type=Path, default=ROOT / "results/benchmarks/report_speed.md")
    args = ap.parse_args()
    trees = {"this": ROOT}
    if args.baseline_tree:
        trees = {"baseline": args.baseline_tree.resolve(), "this": ROOT}
    times: dict[str, list[tuple[float, float]]] = {k: [] for k in trees}
    load0 = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeats):
            for name, tree in trees.items():
                times[name].append(run_report(tree, Path(tmp) / f"{name}-{r}"))
                print(
                    f"{name} #{r}: wall {times[name][-1][0]:.1f} s, cpu {times[name][-1][1]:.1f} s"
                )
        same = None
        if args.baseline_tree:
            a, b = Path(tmp) / "baseline-0", Path(tmp) / "this-0"
            same = all(filecmp.cmp(a / f, b / f, shallow=False) for f in TEXT_OUTPUTS)
    load1 = os.getloadavg()
    lines = [
        "# Report speed (demo)",
        "",
        f"Command: `python -m benchmarks.report_speed{' --baseline-tree ' + str(args.baseline_tree) if args.baseline_tree else ''} --repeats {args.repeats}`",  # noqa: E501
        "",
        f"Report: `python -m analysis.report {' '.join(ARGS)} --out DIR`; "
        f"{os.cpu_count()} CPUs, load average {load0[0]:.1f} before, {load1[0]:.1f} after "
        "(a shared machine: CPU time is the steadier number).",
        "",
        "| tree | best wall s | best CPU s |",
        "|---|---|---|",
    ]
    for name, ts in times.items():
        lines.append(f"| {name} | {min(t[0] for t in ts):.1f} | {min(t[1] for t in ts):.1f} |")
    if args.baseline_tree:
        wall = min(t[0] for t in times["baseline"]) / min(t[0] for t in times["this"])
        cpu = min(t[1] for t in times["baseline"]) / min(t[1] for t in times["this"])
        lines += [
            "",
            f"Speed-up (baseline / this): wall {wall:.2f}x, CPU {cpu:.2f}x; "
            f"{', '.join(TEXT_OUTPUTS)} byte-identical: {same}.",
        ]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
