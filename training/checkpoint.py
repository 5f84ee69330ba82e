"""Atomic checkpoints: write a temporary file, fsync it, rename it over the target.

A crash (or SIGKILL) mid-write leaves at worst a stray `*.tmp-*` file, never a truncated
`last.pt`: readers only ever see a complete old file or a complete new one.

Layout under `<runs_dir>/<run_key>/`:
    last.pt               periodic resume checkpoint (train.checkpoint_every)
    tokens_<T>.pt         named branch checkpoints (train.save_at_tokens)
    config.yaml           the resolved config
    .lock                 held (fcntl) by the process training the key (`run_lock`)
    <name>.shards-<step>-<nonce>/
                          `train.parallel=fsdp`: the model and AdamW shards of one save
                          (`torch.distributed.checkpoint`, every rank writes its own); the
                          file <name> (last.pt, tokens_<T>.pt) holds everything else and the
                          folder's name (`shards`), and renaming it into place commits both

The folder is shared by every experiment and tracking store that trains the run key: each
checkpoint records the MLflow run that wrote it (`mlflow_run_id`, `mlflow_experiment_id`), and a
run resumes only a checkpoint of its own (`owner`); a foreign one is trained over from step 0.

torch (~2.3 s to import) is imported only to read or write a checkpoint: config checks (run
keys, `identity`) and sweep plans use this module without one.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

from training.paths import fsync_dir, open_lock

LAST = "last.pt"
BRANCH_PREFIX, SUFFIX = "tokens_", ".pt"


def branch_name(tokens: int) -> str:
    return f"{BRANCH_PREFIX}{tokens}{SUFFIX}"


def _open_new(fd: int, path: Path) -> BinaryIO:
    """The writer of the new temporary file for `path` (tests put /dev/full behind it)."""
    return os.fdopen(fd, "wb")


def _os_error(e: BaseException) -> OSError | None:
    """The OSError behind `e`: itself, or the one torch.save's C++ writer turned into
    `RuntimeError: [enforce fail at inline_container.cc:...]` (kept as its __context__)."""
    while e is not None and not isinstance(e, OSError):
        e = e.__cause__ or e.__context__
    return e


def atomic_write(
    path: Path, write: Callable[[BinaryIO], None], before_commit: Callable[[], None] | None = None
) -> None:
    """Call `write(file)` on a temporary file next to `path`, fsync, call `before_commit()`,
    then rename it to `path`. A failing disk (full, read-only) raises OSError naming `path`
    and the reason; an exception from `before_commit` passes through and leaves `path` as it
    was."""
    path = Path(path)
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".tmp-")
        with _open_new(fd, path) as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
    except BaseException as e:
        _discard(path, tmp, e)
    try:
        if before_commit is not None:
            before_commit()
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    try:
        os.replace(tmp, path)
    except BaseException as e:
        _discard(path, tmp, e)
    fsync_dir(path.parent)


def _discard(path: Path, tmp: str | None, e: BaseException) -> None:
    """Remove the temporary file of a failed write and raise `e`, an OSError naming `path`
    where the disk is the cause."""
    if tmp is not None:
        Path(tmp).unlink(missing_ok=True)
    cause = _os_error(e)
    if cause is None:
        raise e
    reason = (cause.strerror or str(cause)).lower()
    raise OSError(cause.errno, f"cannot write {path}: {reason}") from e


def save_checkpoint(
    path: Path, state: dict[str, Any], before_commit: Callable[[], None] | None = None
) -> None:
    """torch.save `state` to `path` atomically; `before_commit` runs once the file is written
    and before it replaces `path` (the run's metrics are committed there: a checkpoint never
    records a step whose metrics are not in the store, and the two writes overlap)."""
    import torch

    atomic_write(Path(path), lambda f: torch.save(state, f), before_commit)


def load_checkpoint(path: Path) -> dict[str, Any]:
    """Load a checkpoint to CPU (tensors, numbers, strings only: weights_only=True)."""
    import torch

    return torch.load(Path(path), map_location="cpu", weights_only=True)


LOCK = ".lock"


@contextlib.contextmanager
def run_lock(rdir: Path, run_key: str) -> Iterator[None]:
    """Hold an exclusive lock on the run key (`<rdir>/.lock`) while it is trained.

    A second process training the same key (two identical commands, or two sweeps sharing a
    point) waits here, after one line on stderr, until the first ends; it then finds the run
    FINISHED (and reuses it) or interrupted (and resumes it). The lock belongs to the open file:
    the kernel releases it when the holder exits, SIGKILL included."""
    rdir = Path(rdir)
    rdir.mkdir(parents=True, exist_ok=True)
    with open_lock(rdir / LOCK) as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            holder = f.read().strip() or "?"
            print(
                f"run key {run_key} is being trained by another process (pid {holder}, lock "
                f"{rdir / LOCK}): waiting for it to end",
                file=sys.stderr,
                flush=True,
            )
            fcntl.flock(f, fcntl.LOCK_EX)
        f.seek(0)
        f.truncate()
        f.write(str(os.getpid()))
        f.flush()
        try:
            yield
        finally:  # no pid left behind: an empty lock file means nobody holds it
            f.seek(0)
            f.truncate()
            f.flush()
            fcntl.flock(f, fcntl.LOCK_UN)


def remove_stale_temporaries(rdir: Path) -> list[Path]:
    """Delete `*.tmp-*` files left by writes that were killed mid-way (call under `run_lock`:
    no other process is writing there then). Returns what was removed."""
    removed = []
    for tmp in Path(rdir).glob("*.tmp-*"):
        with contextlib.suppress(OSError):
            tmp.unlink()
            removed.append(tmp)
    return removed


SHARDS = ".shards-"


def shards_name(checkpoint_name: str, step: int, nonce: str) -> str:
    """A new folder per sharded save, never written over: the checkpoint file that names it
    commits it (`nonce` is the same on every rank)."""
    return f"{checkpoint_name}{SHARDS}{step}-{nonce}"


def shards_of(path: Path) -> str | None:
    """The shard folder (a name in the same folder) a checkpoint file names; None: the file
    holds the whole model and optimizer itself."""
    return _peek(path).get("shards")


def _remove_folders(folders) -> list[Path]:
    removed = []
    for folder in folders:
        if folder.is_dir():
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed


def remove_replaced_shards(rdir: Path, name: str, kept: str | None) -> list[Path]:
    """After `<name>` was committed: the shard folders of its earlier saves (all but `kept`)."""
    return _remove_folders(f for f in Path(rdir).glob(f"{name}{SHARDS}*") if f.name != kept)


def remove_unreferenced_shards(rdir: Path) -> list[Path]:
    """Delete shard folders that no checkpoint file names (a save killed before its commit);
    call under `run_lock`. Returns what was removed."""
    rdir = Path(rdir)
    referenced = set()
    for path in rdir.glob(f"*{SUFFIX}"):
        with contextlib.suppress(Exception):  # an unreadable file is the resume's to report
            referenced.add(shards_of(path))
    return _remove_folders(f for f in rdir.glob(f"*{SHARDS}*") if f.name not in referenced)


def run_dir(runs_dir: Path, run_key: str) -> Path:
    return Path(runs_dir) / run_key


def branch_checkpoint_path(runs_dir: Path, run_key: str, tokens: int) -> Path:
    """Where the run `run_key` saves its `train.save_at_tokens` checkpoint for `tokens`."""
    return run_dir(runs_dir, run_key) / branch_name(int(tokens))


def _peek(path: Path) -> dict[str, Any]:
    """A checkpoint's small entries without reading its tensors (memory-mapped load)."""
    import torch

    try:
        state = torch.load(Path(path), map_location="cpu", weights_only=True, mmap=True)
    except RuntimeError:  # not a zip-format checkpoint: mmap unsupported, read it all
        state = load_checkpoint(path)
    return {k: v for k, v in state.items() if isinstance(v, (str, int, float, type(None)))}


def owner(path: Path) -> str | None:
    """The MLflow run id that wrote the checkpoint at `path` (None: not recorded)."""
    return _peek(path).get("mlflow_run_id")


def identity(path: str | Path, batch_tokens: int) -> str:
    """What the run key records of `train.init_from`: the checkpoint's run key and step
    (`<run_key>@<step>`), not its path. A checkpoint that does not exist yet (a WSD branch
    planned before its stable run has trained) is read from the layout:
    `<anything>/<run_key>/tokens_<T>.pt` -> step ceil(T / batch_tokens), the step that
    `train.save_at_tokens=[T]` saves it at. A file without a recorded run key: its sha256."""
    path = Path(path)
    if path.is_file():
        info = _peek(path)
        if isinstance(info.get("run_key"), str) and isinstance(info.get("step"), int):
            return f"{info['run_key']}@{info['step']}"
        h = hashlib.sha256()
        with open(path, "rb") as f:
            while chunk := f.read(1 << 20):
                h.update(chunk)
        return f"sha256:{h.hexdigest()[:16]}"
    name = path.name
    if name.startswith(BRANCH_PREFIX) and name.endswith(SUFFIX):
        tokens = name[len(BRANCH_PREFIX) : -len(SUFFIX)]
        if tokens.isdigit() and path.parent.name:
            return f"{path.parent.name}@{-(-int(tokens) // batch_tokens)}"
    raise FileNotFoundError(str(path))
