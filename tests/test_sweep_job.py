"""A sweep job's share of the machine (sweeps.job): each live process holds one GPU slot (jobs
beyond the GPUs share), and its torch threads follow its CPU allocation."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

HOLD = (
    "import os, sys, time; from sweeps.job import claim_gpu; g = claim_gpu(); "
    "print(g, os.environ['CUDA_VISIBLE_DEVICES'], flush=True); time.sleep(float(sys.argv[1]))"
)


def test_each_job_process_claims_its_own_gpu_slot(tmp_path):
    env = {**os.environ, "SCALING_LAB_GPU_POOL": "0,1,0", "SCALING_LAB_GPU_LOCKS": str(tmp_path)}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    holders = []
    for _ in range(3):
        p = subprocess.Popen(
            [sys.executable, "-c", HOLD, "5"], env=env, stdout=subprocess.PIPE, text=True
        )
        holders.append((p, p.stdout.readline().split()))  # wait until it holds its slot
    assert [h[1] for h in holders] == [["0", "0"], ["1", "1"], ["0", "0"]]
    fourth = subprocess.run(
        [sys.executable, "-c", HOLD, "0"], env=env, capture_output=True, text=True
    )
    assert fourth.returncode != 0 and "every GPU slot is taken" in fourth.stderr
    holders[1][0].kill()
    holders[1][0].wait()
    time.sleep(0.1)
    again = subprocess.run(
        [sys.executable, "-c", HOLD, "0"], env=env, capture_output=True, text=True
    )
    assert again.stdout.split() == ["1", "1"]  # the freed slot is reused
    for p, _ in holders:
        p.kill()
        p.wait()


THREADS = """
import os, sys, torch
from sweeps.job import allocated_cpus, share_cpu
if sys.argv[1] == "pin":
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
share_cpu(int(sys.argv[2]))
print(allocated_cpus(), torch.get_num_threads(), os.environ["RAYON_NUM_THREADS"])
"""


@pytest.mark.parametrize(
    "pin, jobs, env, expect",
    [
        ("pin", 1, {}, lambda cpus: (1, 1)),  # the affinity mask, not os.cpu_count()
        ("all", 1, {"SLURM_CPUS_PER_TASK": "1"}, lambda cpus: (1, 1)),  # the SLURM allocation
        ("all", 2, {}, lambda cpus: (cpus, max(1, cpus // 2))),  # 2 local jobs share the cores
        # a SLURM job's allocation is its own: sweep.jobs does not divide it
        ("all", 2, {"SUBMITIT_EXECUTOR": "slurm"}, lambda cpus: (cpus, cpus)),
    ],
)
def test_threads_follow_the_allocation(pin, jobs, env, expect):
    base = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SUBMITIT_"))}
    base.pop("RAYON_NUM_THREADS", None)
    base.pop("SCALING_LAB_GPU_POOL", None)
    out = subprocess.run(
        [sys.executable, "-c", THREADS, pin, str(jobs)],
        env={**base, **env, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        check=True,
    )
    cpus = len(os.sched_getaffinity(0))
    allocated, threads, rayon = map(int, out.stdout.split())
    assert (allocated, threads) == expect(cpus) and rayon == threads
