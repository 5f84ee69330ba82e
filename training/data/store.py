"""Token cache folders: integrity checks, the build lock and the atomic publish.

A cache folder is built in a temporary folder next to it and renamed into place: two processes
racing to build it both succeed, one rename wins, nobody reads a half-written cache; a folder
left by an interrupted build (`<key>.tmp-*`) is never read and is removed by the next builder.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

from training.data.filehash import file_sha256, recall, remember
from training.paths import open_lock

log = logging.getLogger("training.data")

VERIFY_MAX_BYTES = 2 << 30  # checksum caches up to 2 GiB on load (sha256 ~1.5 GB/s); sizes always
_verified: set[tuple] = set()  # caches whose checksums matched in this process, by file stats


def cache_problem(cache: Path, just_built: bool = False) -> str | None:
    """Why the token cache folder `cache` does not hold what its meta.json promises, or None.

    Checks that meta.json parses, that train.bin / val.bin have exactly n_*_tokens tokens of
    its dtype (a truncated file, even to a whole number of tokens, is caught), that a BPE cache
    has its tokenizer.json, and, for caches that record sha256 checksums (built since they were
    added) and total at most VERIFY_MAX_BYTES, that every file matches its checksum (once per
    file state: remembered in this process and on disk, training.data.filehash). `just_built`:
    the caller holds the cache's lock right after it was built and published, so its files are
    settled although new (a match is remembered: the next process's start-up reads none)."""
    try:
        meta = json.loads((cache / "meta.json").read_text())
        itemsize = np.dtype(meta["dtype"]).itemsize
        names = ["train.bin", "val.bin"]
        for name, n in zip(names, (meta["n_train_tokens"], meta["n_val_tokens"])):
            size = (cache / name).stat().st_size
            if size != int(n) * itemsize:
                return (
                    f"{name} has {size} bytes, meta.json promises {n} tokens ({n * itemsize} bytes)"
                )
        if meta.get("kind") == "pairs":
            for split in ("train", "val"):
                size = (cache / f"{split}.offsets.bin").stat().st_size
                n = meta[f"n_{split}_pairs"]
                if size != (2 * int(n) + 1) * 8:
                    return f"{split}.offsets.bin has {size} bytes, meta.json promises {n} pairs"
        if meta["tokenizer"] == "bpe":
            names.append("tokenizer.json")
            if not (cache / "tokenizer.json").is_file():
                return "tokenizer.json is missing"
        sums = meta.get("sha256") or {}
        stats = [(cache / name).stat() for name in sums]
        signature = tuple(
            (str(cache / n), st.st_size, st.st_mtime_ns, st.st_ino) for n, st in zip(sums, stats)
        )
        known = signature in _verified or recall(("verified", *signature)) is not None
        if sums and not known and sum(st.st_size for st in stats) <= VERIFY_MAX_BYTES:
            for name, digest in sums.items():
                if file_sha256(cache / name) != digest:
                    return f"{name} does not match its sha256 in meta.json"
            _verified.add(signature)
            newest = 0 if just_built else max(st.st_mtime_ns for st in stats)
            remember(("verified", *signature), "ok", newest)
    except (OSError, ValueError, KeyError, TypeError) as e:
        return f"unreadable ({type(e).__name__}: {e})".splitlines()[0]
    return None


def discard(cache: Path) -> None:
    """Move a bad cache out of the way (readers that mapped its files keep them) and delete it."""
    trash = Path(tempfile.mkdtemp(dir=cache.parent, prefix=cache.name + ".bad-"))
    os.rename(cache, trash / cache.name)
    shutil.rmtree(trash, ignore_errors=True)


def temporary(final: Path) -> Path:
    """A fresh folder to build `final` in (published by `publish`)."""
    return Path(tempfile.mkdtemp(dir=final.parent, prefix=final.name + ".tmp-"))


def publish(tmp: Path, meta: dict, final: Path) -> None:
    """Write meta.json last, then rename `tmp` to `final` (atomic; if another process got there
    first, its cache stands)."""
    with open(tmp / "meta.json", "w") as f:
        f.write(json.dumps(meta, indent=1))
        f.flush()
        os.fsync(f.fileno())
    try:
        os.rename(tmp, final)
    except OSError:
        if not (final / "meta.json").exists():
            raise


def record_meta(cache: Path, meta: dict) -> None:
    """Rewrite a published cache's meta.json with `meta` (atomic; best effort: a read-only
    cache keeps its old one). Its token files and checksums are untouched."""
    tmp = cache / f"meta.json.tmp-{os.getpid()}"
    try:
        with open(tmp, "w") as f:
            f.write(json.dumps(meta, indent=1))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, cache / "meta.json")
    except OSError as e:
        tmp.unlink(missing_ok=True)
        log.warning("could not update %s/meta.json (%s)", cache, e)


def ensure_cache(final: Path, build: Callable[[Path], None]) -> None:
    """Make `final` a sound cache, building it with `build(final)` if missing or spoiled. One
    builder per cache: others (sweep jobs starting together, SLURM array tasks on a shared
    filesystem) wait on the lock and then find the finished cache."""

    def problem() -> str | None:
        return cache_problem(final) if final.exists() else "missing"

    if not problem():
        return
    final.parent.mkdir(parents=True, exist_ok=True)
    with open_lock(final.parent / f"{final.name}.lock") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if why := problem():
            for stale in final.parent.glob(final.name + ".tmp-*"):  # an interrupted build
                shutil.rmtree(stale, ignore_errors=True)
            if why != "missing":  # truncated, edited or half-deleted: never train on it
                log.warning("token cache %s is corrupt (%s); rebuilding it", final, why)
                discard(final)
            build(final)
        if why := cache_problem(final, just_built=True):
            raise RuntimeError(f"token cache {final}: {why} right after building it")
