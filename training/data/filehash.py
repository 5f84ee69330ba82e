"""File hashes remembered by the files' stats, in this process and on disk.

Hashing is remembered in `<cache dir>/fingerprints` (one small file per set of file stats:
name, path, size, mtime, inode), so a run on a prepared corpus only stats its files. A file
modified within RACY_S seconds is hashed again every time (its mtime may repeat).

Two fingerprints of a set of files, chosen by its size (the content, so the same files give the
same one wherever they are): up to SEQUENTIAL_MAX_BYTES one sha256 over every name and byte in
order (the fingerprint every run key had before per-file hashing: unchanged); above it a sha256
over each name and its file's own sha256 (a Merkle list), whose per-file hashes are remembered
in a table per folder, so after an edit only the changed files are read again. Why the size
decides and what it costs: docs/corpora.md, "Fingerprints".
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from pathlib import Path

from training.data.sources import _sha
from training.paths import default_cache_dir

RACY_S = 2.0
SEQUENTIAL_MAX_BYTES = 1 << 30  # larger file sets get the per-file (Merkle) fingerprint
MERKLE_TAG = "merkle-v1"
_hashed: dict[tuple, str] = {}  # file signatures -> digest, for this process
_unsaved: dict[tuple, str] = {}  # remembered before the cache folder existed
_unsaved_tables: dict[Path, dict] = {}  # per-file hash tables, likewise


_root: list[Path] = []  # the cache folder fingerprints go to (`use_cache_dir`)


def use_cache_dir(folder: Path | None) -> None:
    """Remember fingerprints under `folder` (a run's `paths.cache_dir`), None: the default
    (`$SCALING_LAB_CACHE_DIR` or the project's), so a run writes nowhere else."""
    _root[:] = [folder] if folder is not None else []


def cache_dir() -> Path:
    return _root[0] if _root else default_cache_dir()


def memo_path(signature: tuple) -> Path:
    return cache_dir() / "fingerprints" / _sha([repr(signature)])[:32]


def recall(signature: tuple, in_process: bool = True) -> str | None:
    """What was remembered for `signature` (this process, then disk), or None. `in_process`:
    False for what one process asks once (a unit's identity): disk only, nothing kept here."""
    if in_process and signature in _hashed:
        return _hashed[signature]
    try:
        value = memo_path(signature).read_text().strip()
    except OSError:
        return None
    if in_process:
        _hashed[signature] = value
    return value or None


def remember(signature: tuple, value: str, newest_mtime_ns: int, in_process: bool = True) -> None:
    """Remember `value` unless a file is younger than RACY_S; on disk (atomic, best effort) once
    the cache folder exists (`persist`)."""
    if time.time() - newest_mtime_ns / 1e9 <= RACY_S:
        return
    if in_process:
        _hashed[signature] = value
    if not cache_dir().is_dir():  # a dry run creates nothing: preparing makes the cache
        _unsaved[signature] = value
        return
    _save(signature, value)


def persist() -> None:
    """Create the cache folder and write there what was remembered before it existed (a run's
    first fingerprint, computed at config time), so the next process only stats the files."""
    try:
        cache_dir().mkdir(parents=True, exist_ok=True)
    except OSError:
        return
    while _unsaved:
        _save(*_unsaved.popitem())
    while _unsaved_tables:
        path, table = _unsaved_tables.popitem()
        _write(path, json.dumps(table))


def _save(signature: tuple, value: str) -> None:
    _write(memo_path(signature), value)


def _write(path: Path, value: str) -> None:
    try:
        path.parent.mkdir(exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".tmp-")
        with os.fdopen(fd, "w") as f:
            f.write(value)
        os.replace(tmp, path)
    except OSError:  # a read-only cache: hash again next time
        pass


def signature_of(files: list[tuple[str, Path]]) -> tuple[tuple, int]:
    """(the files' names, paths, sizes, mtimes and inodes; the newest mtime in ns)."""
    stats = [(rel, str(p), p.stat()) for rel, p in files]
    sig = tuple((rel, path, st.st_size, st.st_mtime_ns, st.st_ino) for rel, path, st in stats)
    return sig, max((st.st_mtime_ns for _, _, st in stats), default=0)


def hash_files(files: list[tuple[str, Path]]) -> str:
    """The fingerprint (16 hex) of (name, bytes) pairs, remembered by the files' stats: the
    sequential sha256 up to SEQUENTIAL_MAX_BYTES in all, else the Merkle one. A remembered
    fingerprint is reused while the stats are unchanged, whichever way it was computed."""
    sig, newest = signature_of(files)
    if digest := recall(sig):
        return digest
    if sum(size for _, _, size, _, _ in sig) <= SEQUENTIAL_MAX_BYTES:
        digest = sequential_digest(files)
    else:
        digest = merkle_digest(files, sig)
    remember(sig, digest, newest)
    return digest


def sequential_digest(files: list[tuple[str, Path]]) -> str:
    """sha256 (16 hex) of every name and its bytes, in order: every file read."""
    h = hashlib.sha256()
    for rel, p in files:
        h.update(rel.encode("utf-8", "surrogatepass") + b"\0")
        with open(p, "rb") as f:
            while chunk := f.read(1 << 20):
                h.update(chunk)
        h.update(b"\0")
    return h.hexdigest()[:16]


def merkle_digest(files: list[tuple[str, Path]], sig: tuple) -> str:
    """sha256 (16 hex) of every name and its file's sha256, in order. A file's sha256 comes from
    the folder's table when its size, mtime and inode are the table's, else from its bytes."""
    table_path = _table_path([path for _, path, *_ in sig])
    table = _unsaved_tables.get(table_path) or _read_table(table_path)
    h, fresh, settled = hashlib.sha256(), {}, time.time() - RACY_S
    h.update(MERKLE_TAG.encode() + b"\0")
    for (rel, p), (_, path, size, mtime_ns, inode) in zip(files, sig):
        known = table.get(path)
        if known and known[:3] == [size, mtime_ns, inode]:
            sha = known[3]
        else:
            sha = file_sha256(p)
        if mtime_ns / 1e9 < settled:  # a file written just now may change within its mtime
            fresh[path] = [size, mtime_ns, inode, sha]
        h.update(rel.encode("utf-8", "surrogatepass") + b"\0" + sha.encode() + b"\0")
    if fresh != table:
        _keep_table(table_path, fresh)
    return h.hexdigest()[:16]


def _table_path(paths: list[str]) -> Path:
    """One table per folder (the files' common path): an edit finds the hashes of before."""
    where = os.path.commonpath(paths) if paths else ""
    return cache_dir() / "fingerprints" / ("files-" + _sha(["files", where])[:32])


def _read_table(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _keep_table(path: Path, table: dict) -> None:
    if cache_dir().is_dir():
        _write(path, json.dumps(table))
    else:  # a dry run creates nothing: preparing makes the cache folder (persist)
        _unsaved_tables[path] = table


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()
