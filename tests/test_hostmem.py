"""training.hostmem: glibc keeps freed blocks, so touching a reallocated tensor costs no page faults.

Measured in a child process: the setting is process-wide and cannot be undone.
"""

import json
import platform
import subprocess
import sys

import pytest

CHILD = r"""
import json, resource, sys
import torch
from training.hostmem import keep_freed_memory

def faults_per_cycle(cycles=30, numel=16 * 1024 * 1024):  # 64 MB of fp32, above any mmap default
    faults = []
    for _ in range(cycles):
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        x = torch.empty(numel)
        x.fill_(1.0)  # first touch of every page
        del x
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    # Steady state: the first cycles grow the heap (torch's aligned allocations leave small
    # remainders that glibc's per-thread cache holds back from coalescing until it is full).
    return max(faults[-10:])

keep = sys.argv[1] == "keep"
applied = keep_freed_memory() if keep else False
print(json.dumps({"applied": applied, "faults": faults_per_cycle()}))
"""


def _child(mode: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, mode], capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc only"
)
def test_kept_memory_is_reused_without_page_faults():
    system, kept = _child("system"), _child("keep")
    assert kept["applied"] is True
    pages = 64 * 1024 * 1024 // 4096
    # Kept: the 64 MB block comes back from malloc's heap, already mapped.
    assert kept["faults"] < pages // 20, kept
    # System malloc maps it afresh every cycle (above its largest adaptive mmap threshold): one
    # fault per page (fewer with transparent huge pages, but never none).
    assert system["faults"] > kept["faults"], (system, kept)
