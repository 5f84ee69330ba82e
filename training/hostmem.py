"""Host allocator settings for training on the CPU: keep freed memory instead of unmapping it.

glibc's malloc serves a block above its mmap threshold (adaptive, at most 32 MB on 64-bit) with a
fresh ``mmap`` and returns it to the OS on ``free``; it also trims the top of its heap once more
than twice that threshold is free there. A training step frees and reallocates the same
activation-, gradient- and logit-sized tensors every step, so every step pays the kernel's page
faults to touch them again (most of a fresh 32 MB tensor's cost: docs/performance.md, host allocator).
Raising both thresholds makes malloc keep and reuse those blocks, the same effect PyTorch's CPU
tuning guides get from preloading jemalloc or tcmalloc, without a separate library.

The cost is that memory freed by one run stays with the process for its next run (a sweep trains
many in one process): resident memory does not fall back between runs, and a run's peak RSS
rises a little (docs/performance.md, host allocator). The settings are process-wide and stay until the process exits.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import platform

# mallopt parameters, from glibc's <malloc.h>.
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
# Blocks up to 1 GiB come from (and go back to) malloc's own heap; mallopt takes a C int.
KEEP_BELOW_BYTES = 1 << 30


def keep_freed_memory(limit_bytes: int = KEEP_BELOW_BYTES) -> bool:
    """Set glibc's mmap and trim thresholds to ``limit_bytes``; False where it is not glibc.

    Returns True only when both settings took effect.
    """
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return False
    mallopt = libc.mallopt
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    # mallopt returns 1 on success and 0 on error.
    return bool(mallopt(M_MMAP_THRESHOLD, limit_bytes)) and bool(
        mallopt(M_TRIM_THRESHOLD, limit_bytes)
    )
