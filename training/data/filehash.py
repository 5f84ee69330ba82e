"""File hashes remembered by the files' stats, in this process and on disk.

Hashing is remembered in `<cache dir>/fingerprints` (one small file per set of file stats:
name, path, size, mtime, inode), so a run on a prepared corpus only stats its files. A file
modified within RACY_S seconds is hashed again every time (its mtime may repeat).
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import time
from pathlib import Path

from training.data.sources import _sha
from training.paths import default_cache_dir

RACY_S = 2.0
_hashed: dict[tuple, str] = {}  # file signatures -> digest, for this process
_unsaved: dict[tuple, str] = {}  # remembered before the cache folder existed


def memo_path(signature: tuple) -> Path:
    return default_cache_dir() / "fingerprints" / _sha([repr(signature)])[:32]


def recall(signature: tuple) -> str | None:
    """What was remembered for `signature` (this process, then disk), or None."""
    if signature in _hashed:
        return _hashed[signature]
    try:
        value = memo_path(signature).read_text().strip()
    except OSError:
        return None
    _hashed[signature] = value
    return value or None


def remember(signature: tuple, value: str, newest_mtime_ns: int) -> None:
    """Remember `value` unless a file is younger than RACY_S; on disk (atomic, best effort) once
    the cache folder exists (`persist`)."""
    if time.time() - newest_mtime_ns / 1e9 <= RACY_S:
        return
    _hashed[signature] = value
    if not default_cache_dir().is_dir():  # a dry run creates nothing: preparing makes the cache
        _unsaved[signature] = value
        return
    _save(signature, value)


def persist() -> None:
    """Create the cache folder and write there what was remembered before it existed (a run's
    first fingerprint, computed at config time), so the next process only stats the files."""
    try:
        default_cache_dir().mkdir(parents=True, exist_ok=True)
    except OSError:
        return
    while _unsaved:
        _save(*_unsaved.popitem())


def _save(signature: tuple, value: str) -> None:
    path = memo_path(signature)
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
    """sha256 (16 hex) of every (name, bytes) pair, remembered by the files' stats."""
    sig, newest = signature_of(files)
    if digest := recall(sig):
        return digest
    h = hashlib.sha256()
    for rel, p in files:
        h.update(rel.encode("utf-8", "surrogatepass") + b"\0")
        with open(p, "rb") as f:
            while chunk := f.read(1 << 20):
                h.update(chunk)
        h.update(b"\0")
    digest = h.hexdigest()[:16]
    remember(sig, digest, newest)
    return digest


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()
