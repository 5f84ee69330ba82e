"""GPU slots of local sweep jobs: each live process holds one slot; jobs beyond the GPUs share."""

import os
import subprocess
import sys
import time

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
