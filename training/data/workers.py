"""The preparation's helper processes: spawned, so that none starts with the builder's memory,
and bound to their parent, so that none outlives it.

A forked process starts as a copy of its parent: forked after the BPE training sample was read,
each encoding worker began with the builder's ~565 MB. A spawned one is a fresh interpreter
that imports only what it runs (training.data.encode: ~100 MB). A spawned process would also
run the caller's script again (the multiprocessing rule: top level behind `if __name__ ==
"__main__":`); the helpers run only this package's functions, so they are started with the
script hidden from them, and a script that calls `prepare_data` at its top level works.

On Linux each helper asks the kernel for SIGKILL when its parent dies (PR_SET_PDEATHSIG), so a
`kill -9` of the builder takes its workers with it at once; elsewhere a thread polls the
parent's pid twice a second.
"""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing as mp
import os
import signal
import sys
import threading
import time
import types
from collections.abc import Callable

PR_SET_PDEATHSIG = 1
POLL_S = 0.5


def exit_with_parent(parent_pid: int) -> None:
    """This process dies when `parent_pid` (its parent) does, whatever kills it."""
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0:
                if os.getppid() != parent_pid:  # the parent died before the request took effect
                    os._exit(1)
                return
        except (OSError, AttributeError):
            pass

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(POLL_S)
        os._exit(1)

    threading.Thread(target=watch, daemon=True, name="exit-with-parent").start()


@contextlib.contextmanager
def _script_hidden():
    """While processes are spawned: `__main__` without a file or spec, so that they do not run
    the caller's script again (they need nothing from it)."""
    main = sys.modules["__main__"]
    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        yield
    finally:
        sys.modules["__main__"] = main


def _init(parent_pid: int, initializer: Callable | None, initargs: tuple) -> None:
    exit_with_parent(parent_pid)
    if initializer is not None:
        initializer(*initargs)


def pool(n: int, initializer: Callable | None = None, initargs: tuple = ()):
    """`n` spawned worker processes that exit with this one; the tokenizers library's threads
    off in them (one unit per worker, one worker per core)."""
    before = os.environ.get("TOKENIZERS_PARALLELISM")
    os.environ["TOKENIZERS_PARALLELISM"] = "false"  # inherited by the spawned interpreters
    try:
        with _script_hidden():
            return mp.get_context("spawn").Pool(n, _init, (os.getpid(), initializer, initargs))
    finally:
        if before is None:
            del os.environ["TOKENIZERS_PARALLELISM"]
        else:
            os.environ["TOKENIZERS_PARALLELISM"] = before


def run_apart(fn: Callable, *args):
    """fn(*args) in one spawned process that exits with this one (its memory freed when it
    returns); its exception, if any, raised here. The tokenizers library's threads stay on."""
    with _script_hidden():
        apart = mp.get_context("spawn").Pool(1, _init, (os.getpid(), None, ()))
    with apart:
        return apart.apply(fn, args)
