"""Where scaling-lab keeps its files: absolute defaults under the project root.

Every default is absolute so that no file ends up relative to whatever directory a job happens
to run in (MLflow's own default is `sqlite:///mlflow.db` relative to the cwd). Environment
variables override the defaults; tests point them at temporary directories.
"""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path
from typing import IO

PROJECT_ROOT = Path(__file__).resolve().parents[1]

ENV_TRACKING_URI = "MLFLOW_TRACKING_URI"
ENV_RUNS_DIR = "SCALING_LAB_RUNS_DIR"
ENV_CACHE_DIR = "SCALING_LAB_CACHE_DIR"


def default_tracking_uri() -> str:
    """`MLFLOW_TRACKING_URI` if set, else `sqlite:///<project root>/mlruns.db` (absolute)."""
    return os.environ.get(ENV_TRACKING_URI) or f"sqlite:///{PROJECT_ROOT / 'mlruns.db'}"


def default_runs_dir() -> Path:
    """Checkpoints and per-run files, one folder per run key."""
    return Path(os.environ.get(ENV_RUNS_DIR) or PROJECT_ROOT / "runs").resolve()


def default_cache_dir() -> Path:
    """Tokenizers and token memmaps, one folder per corpus fingerprint + tokenizer settings."""
    return Path(os.environ.get(ENV_CACHE_DIR) or PROJECT_ROOT / ".cache" / "data").resolve()


def resolve_dir(value: str | os.PathLike | None, default: Path) -> Path:
    """A configured directory (None -> default), made absolute against the cwd at call time."""
    return default if value in (None, "") else Path(value).expanduser().resolve()


NAME_MAX = 255  # bytes of one path component (Linux, macOS)
PATH_ROOM = 3800  # of PATH_MAX (4096), leaving room for what a run writes under the folder


def unusable_folder(folder: Path) -> str | None:
    """Why `folder` can neither be used nor made (a name too long for the filesystem, a file
    on its way, a parent where no folder can be created: read-only, no permission, /proc),
    or None. Only a probe folder is made in the nearest existing parent, and removed."""
    if long := next((p for p in folder.parts if len(os.fsencode(p)) > NAME_MAX), None):
        n = len(os.fsencode(long))
        return f"a name in the path is {n} bytes ({long[:20]}...), over the {NAME_MAX} allowed"
    if len(os.fsencode(str(folder))) > PATH_ROOM:
        return f"{str(folder)[:60]}...: the path is over {PATH_ROOM} bytes"
    probe = folder
    while not (probe.exists() or probe.is_symlink()):
        probe = probe.parent
    if not probe.is_dir():
        return f"{probe} is a file, not a folder"
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".write-probe-", dir=probe))
    except OSError as e:
        return f"cannot create a folder in {probe} ({e.strerror})"
    return None


def fsync_dir(path: Path) -> None:
    """Make a rename or a new file in `path` durable (the folder's entry, not only the file)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def open_lock(path: str | os.PathLike, mode: str = "r+") -> IO[str]:
    """Open (creating it) the lock file `path` for fcntl locks, never following a symlink there
    and never truncating: a link planted in its place must not redirect writes to its target.
    A symlink raises OSError(ELOOP) naming `path` (`training.cli.environment_error` reports it)."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
    except OSError as e:
        if e.errno == errno.ELOOP:
            why = "is a symbolic link, not a lock file (not followed); remove it"
            raise OSError(errno.ELOOP, why, str(path)) from None
        raise
    return os.fdopen(fd, mode)
